"""Half-precision arithmetic in Triton's interpreter as a GPU does it (worker side, CPU only;
``interpreter_as_gpu.install`` calls ``install`` here).

* fp16 sums.  ``tl.sum`` of an fp16 block adds in fp16 on a GPU (Triton keeps a float block's
  own type for the sum); the interpreter took numpy's ``np.sum``, which adds fp16 in fp32 and
  rounds once.  A reduce that summed an fp16 row with no upcast passed the ``large-cancelling``
  case (rows of +-60000) on the CPU and gave inf on a GPU.  The sum is now a tree of fp16 adds,
  each rounded: a partial sum past 65504 is inf, as on the GPU (red-team pass 14).
* fp16 dot accumulators.  ``tl.dot(a, b, out_dtype=tl.float16)`` accumulates in fp16 registers
  on a GPU: the tensor core's products of 16 values of K at a time are added into the fp16
  accumulator, rounded each time.  The interpreter's numpy matmul added all of K in fp32; the
  matmul's ``fp16-overflow`` case (a running sum past 65504 halfway through K) passed.  Now
  each 16-wide slice of K is added into the accumulator and rounded to fp16.
* fp8 dots are refused (``NotModelledError``): a GPU adds fp8 products into an fp16
  accumulator 32 values of K at a time, or into fp32 with reduced precision on Hopper; the
  interpreter converted them to fp16 and added all of K in fp32 (red-team pass 15: an fp8 dot
  with an fp16 accumulator, taken only where the fp8 split of a tile was exact, passed every CPU
  stage and overflowed on the ``fp16-overflow`` case).  No problem here has an 8-bit dtype.
* bf16 arithmetic.  The interpreter holds bf16 as its bit patterns (uint16) and applied numpy's
  integer arithmetic to them: ``x + y`` of two bf16 blocks, ``-x``, an fma, a sum, a max of
  negative values, a dot of bf16 blocks were wrong (a correct kernel that computed in bf16
  failed every CPU stage).  These now compute on the values and round the result to bf16 (to nearest, ties to even), and
  ``tl.sum`` of a bf16 block is a tree of bf16 adds as for fp16.  Each operation rounds, as
  torch's eager ops do; a GPU build may contract a multiply and an add into one fma, rounded
  once (``x * y - x`` of bf16 blocks on an H100 differed from torch's in the last bit: within
  every bound, as the same contraction of fp32 ops always was).  Not covered: cumulative sums
  and ``tl.clamp`` of bf16 blocks (still the bit patterns' integer arithmetic: wrong, so a kernel
  using them fails on the CPU rather than passing).
* Float atomics.  Triton's interpreter refused ``tl.atomic_xchg`` of fp32 values and
  ``tl.atomic_add`` of bf16 values, both of which a GPU runs (a correct kernel failed on the
  CPU): the exchange swaps the values' bits, the add adds lane after lane, rounding to bf16.
"""
from __future__ import annotations

import numpy as np

MMA_K = 16  # values of K one fp16 tensor-core product adds before the accumulator rounds
FLOAT_BINARY = {np.add, np.subtract, np.multiply, np.divide, np.fmod, np.minimum, np.maximum, np.fmin, np.fmax,
                np.less, np.greater, np.less_equal, np.greater_equal, np.equal, np.not_equal}


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) as the fp32 values they hold (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def tree_sum(values: np.ndarray, axis: int, rounded) -> np.ndarray:
    """Sum along ``axis`` by halves, each add's result passed through ``rounded`` (the values as
    the sum's type holds them): the order a GPU's reduction takes across lanes, and its rounding."""
    data = np.moveaxis(np.asarray(values, dtype=np.float32), axis, -1)
    with np.errstate(over="ignore", invalid="ignore"):
        while data.shape[-1] > 1:
            if data.shape[-1] % 2:
                data = np.concatenate([data, np.zeros(data.shape[:-1] + (1,), dtype=np.float32)], axis=-1)
            half = data.shape[-1] // 2
            data = rounded(data[..., :half] + data[..., half:])
    if data.shape[-1] == 0:
        return np.zeros(data.shape[:-1], dtype=np.float32)
    return data[..., 0]


def as_fp16(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """fp32 values as bf16 bit patterns (uint16) of the same shape, to nearest, ties to even; NaN
    kept quiet."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    quiet = (bits >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(nan, quiet, rounded).astype(np.uint16).reshape(np.shape(values))


def as_bf16(values: np.ndarray) -> np.ndarray:
    return bf16_values(round_to_bf16(values))


def fp16_accumulated_dot(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """a @ b + acc with an fp16 accumulator: each MMA_K-wide slice of K's products summed (exact
    enough in fp32), added to the accumulator and rounded to fp16."""
    total = acc.astype(np.float32)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(0, a.shape[-1], MMA_K):
            total = as_fp16(total + np.matmul(a32[..., k:k + MMA_K], b32[..., k:k + MMA_K, :]))
    return total.astype(np.float16)


def install(interpreter) -> None:
    import triton.language as tl

    builder, handle = interpreter.InterpreterBuilder, interpreter.TensorHandle
    _sum_in_the_blocks_type(interpreter.ReduceOps, tl)
    _dots_as_a_gpu(builder, handle, tl)
    _bf16_arithmetic(builder, handle, interpreter.ReduceOps, tl)
    memory = getattr(interpreter, "_interpreter", None)
    if memory is not None and hasattr(memory, "load") and hasattr(memory, "store"):
        _float_atomics(builder, handle, tl, memory)


def bf16_atomic_add(memory, addresses: np.ndarray, bits: np.ndarray, active: np.ndarray) -> np.ndarray:
    """``tl.atomic_add`` of bf16 values at ``addresses``, lane after lane (lanes may share an
    address): each sum rounded to bf16; returns the values each lane found (0 where inactive).
    ``memory``: the interpreter's own loads and stores by address (``load(ptrs, mask, other,
    dtype)``, ``store(ptrs, values, mask)``)."""
    found = np.zeros(addresses.shape, dtype=np.uint16)
    flat_addresses, flat_bits, flat_active = (np.broadcast_to(a, addresses.shape).reshape(-1)
                                              for a in (addresses, bits, active))
    flat_found, one = found.reshape(-1), np.ones(1, dtype=bool)
    for lane in np.nonzero(flat_active)[0].tolist():
        where = flat_addresses[lane:lane + 1].astype(np.uint64)
        old = np.asarray(memory.load(where, one, np.zeros(1, np.uint16), np.dtype(np.uint16)), dtype=np.uint16)
        flat_found[lane] = old[0]
        memory.store(where, round_to_bf16(bf16_values(old) + bf16_values(flat_bits[lane:lane + 1])), one)
    return found


def _float_atomics(builder: type, handle: type, tl, memory) -> None:
    """Two atomics a GPU runs and Triton's interpreter refused ("Unsupported data type"): an
    exchange of fp32 values (exchanged as their bits) and an add of bf16 values."""
    original = builder.create_atomic_rmw
    as_int = {np.dtype(np.float32): (np.int32, tl.int32), np.dtype(np.float64): (np.int64, tl.int64)}

    def create_atomic_rmw(self, op, ptr, val, mask, sem, scope):
        name = getattr(op, "name", "")
        if name == "XCHG" and val.data.dtype in as_int:
            int_type, tl_type = as_int[val.data.dtype]
            found = original(self, op, ptr, handle(val.data.view(int_type), tl_type), mask, sem, scope)
            return handle(np.asarray(found.data).view(val.data.dtype), val.dtype.scalar)
        if name == "FADD" and val.dtype.scalar == tl.bfloat16 and val.data.dtype == np.uint16:
            active = np.asarray(mask.data, dtype=bool) if mask is not None else np.ones(ptr.data.shape, dtype=bool)
            return handle(bf16_atomic_add(memory, np.asarray(ptr.data), np.asarray(val.data), active),
                          val.dtype.scalar)
        return original(self, op, ptr, val, mask, sem, scope)

    create_atomic_rmw.__qualname__ = f"{builder.__qualname__}.create_atomic_rmw"
    builder.create_atomic_rmw = create_atomic_rmw


def _sum_in_the_blocks_type(reduce_ops: type, tl) -> None:
    original = reduce_ops.sum
    kinds = {tl.float16: (lambda d: d.astype(np.float32), as_fp16, np.float16),
             tl.bfloat16: (bf16_values, as_bf16, None)}

    def sum(self, input):  # noqa: A001 (the interpreter's method name)
        kind = kinds.get(input.dtype.scalar if hasattr(input.dtype, "scalar") else input.dtype)
        if kind is None:
            return original(self, input)
        values, rounded, np_type = kind
        data = values(input.handle.data)
        axis = self.axis
        if axis is None:
            data, axis = data.reshape(-1), 0
        total = tree_sum(data, axis, rounded)
        if self.keep_dims and self.axis is not None:
            total = np.expand_dims(total, axis)
        elif self.keep_dims:
            total = total.reshape((1,) * input.handle.data.ndim)
        total = total.astype(np_type) if np_type is not None else round_to_bf16(total)
        return self.to_tensor(total if total.shape else total[()], input.dtype)

    reduce_ops.sum = sum


class NotModelledError(TypeError):
    """A dot whose GPU arithmetic the CPU judge does not model (8-bit float operands)."""


def _dots_as_a_gpu(builder: type, handle: type, tl) -> None:
    """fp8 operands refused, fp16 operands into an fp16 accumulator every MMA_K of K, bf16
    operands as their values (exact products, accumulated in fp32: the only type allowed)."""
    original = builder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        for operand in (a, b):
            if operand.dtype.scalar.is_floating() and operand.dtype.scalar.primitive_bitwidth == 8:
                raise NotModelledError(
                    f"tl.dot of {operand.dtype.scalar} operands: how a GPU accumulates 8-bit float products (in "
                    "fp16 32 values of K at a time, or in fp32 with reduced precision) is not modelled on the CPU, "
                    "and no problem here has an 8-bit dtype")
        if d.data.dtype == np.float16 and a.data.dtype == np.float16 and b.data.dtype == np.float16:
            return handle(fp16_accumulated_dot(a.data, b.data, d.data), d.dtype.scalar)
        if all(o.dtype.scalar == tl.bfloat16 and o.data.dtype == np.uint16 for o in (a, b)):
            a, b = handle(bf16_values(a.data), tl.float32), handle(bf16_values(b.data), tl.float32)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    create_dot.__qualname__ = f"{builder.__qualname__}.create_dot"
    builder.create_dot = create_dot


def _bf16_arithmetic(builder: type, handle: type, reduce_ops: type, tl) -> None:
    binary, unary, fma, min_max = builder.binary_op, builder.unary_op, builder.create_fma, reduce_ops.min_max

    def is_bf16(*handles) -> bool:
        return all(h.dtype.scalar == tl.bfloat16 and h.data.dtype == np.uint16 for h in handles)

    def result(values: np.ndarray, dtype):
        if values.dtype == np.bool_:  # a comparison: stored in the operands' width, as the interpreter does
            return handle(values.astype(np.uint16), dtype)
        return handle(round_to_bf16(values), dtype)

    def binary_op(self, lhs, rhs, op):
        if op in FLOAT_BINARY and is_bf16(lhs, rhs):
            with np.errstate(all="ignore"):
                return result(op(bf16_values(lhs.data), bf16_values(rhs.data)), lhs.dtype.scalar)
        return binary(self, lhs, rhs, op)

    def unary_op(self, arg, op):
        if is_bf16(arg):
            with np.errstate(all="ignore"):
                return result(op(bf16_values(arg.data)), arg.dtype.scalar)
        return unary(self, arg, op)

    def create_fma(self, x, y, z):
        if is_bf16(x, y, z):
            exact = np.multiply(bf16_values(x.data), bf16_values(y.data), dtype=np.float64) + bf16_values(z.data)
            return handle(round_to_bf16(exact.astype(np.float32)), z.dtype.scalar)
        return fma(self, x, y, z)

    def bf16_min_max(self, input, val_reduce_op, idx_reduce_op=None):
        input = input[0] if isinstance(input, tuple) else input
        if input.dtype != tl.bfloat16 or input.handle.data.dtype != np.uint16:
            return min_max(self, input, val_reduce_op, idx_reduce_op)
        values = bf16_values(input.handle.data)
        found = []
        with np.errstate(all="ignore"):
            if val_reduce_op:
                found.append(self.to_tensor(round_to_bf16(np.asarray(
                    val_reduce_op(values, axis=self.axis, keepdims=self.keep_dims))), input.dtype))
            if idx_reduce_op:
                found.append(self.to_tensor(idx_reduce_op(values, axis=self.axis, keepdims=self.keep_dims), tl.int32))
        return found[0] if len(found) == 1 else tuple(found)

    for name, function in (("binary_op", binary_op), ("unary_op", unary_op), ("create_fma", create_fma)):
        function.__qualname__ = f"{builder.__qualname__}.{name}"
        setattr(builder, name, function)
    bf16_min_max.__qualname__ = f"{reduce_ops.__qualname__}.min_max"
    reduce_ops.min_max = bf16_min_max
