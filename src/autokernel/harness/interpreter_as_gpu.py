"""The Triton interpreter made to compute what a GPU computes where a kernel's result depends
on it (worker side, CPU only): ``install()`` once per process, before any kernel file loads.

* TF32 dots.  The interpreter multiplies fp32 operands in full fp32 whatever the dot's
  ``input_precision``; a GPU's tensor cores take them at TF32 (10 mantissa bits) unless the dot
  asks for "ieee" (or "tf32x3", three TF32 products: about fp32).  The problems' fp32 bounds
  exclude TF32 on purpose (matmul's relative norm 2e-5 against TF32's ~3e-4), so a kernel that
  left the default on passed every CPU stage and failed the GPU's (linear_gelu, fused_mlp and
  matmul alike).  Both fp32 operands of a TF32 dot are rounded to TF32 (to nearest, ties to
  even; inf and NaN kept).  Operands upcast from bf16 or fp16 (the starters' CPU path) have at
  most 11 significant bits: TF32 holds them exactly.
* bf16 casts.  The interpreter converts fp32 to bf16 by dropping the low 16 bits (toward
  zero); a GPU rounds to nearest, ties to even (``cvt.rn.bf16.f32``), unless the cast asks
  otherwise.  Twice toward zero in one output (HF's RMSNorm rounds ``x * rstd`` to the dtype,
  then the product with the weight) put the rmsnorm starter 1.06-1.26x over bf16's bound on
  about one numerics draw in a thousand at the edge shapes: a CPU-only failure of a correct
  kernel.  An fp32 to bf16 cast rounds to nearest even; NaN stays NaN, overflow gives inf.
* Program order.  The interpreter runs a grid's programs one after another in index order; a
  GPU runs them in no set order, so float atomics from several programs add up in a different
  order from call to call.  A kernel that summed a row's partial sums with ``tl.atomic_add``
  was deterministic on the CPU (and failed the GPU's determinism stage).  Each launch runs its
  programs in a fresh random order: every program once, each seeing its own ``program_id``.
"""
from __future__ import annotations

import numpy as np

_INSTALLED = False


def round_to_tf32(values: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    bias = ((bits >> np.uint32(13)) & np.uint32(1)) + np.uint32(0x0FFF)
    rounded = (bits + bias) & np.uint32(0xFFFFE000)
    return np.where(special, bits, rounded).view(np.float32)


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """fp32 values as bf16 bit patterns (uint16), to nearest, ties to even; NaN kept quiet."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    quiet = (bits >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(nan, quiet, rounded).astype(np.uint16)


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    _round_tf32_dots(builder, interpreter.TensorHandle)
    _round_bf16_casts(builder, interpreter.TensorHandle)
    _shuffle_programs(builder, np.random.default_rng())
    _INSTALLED = True


def _round_tf32_dots(builder: type, handle: type) -> None:
    original = builder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if getattr(input_precision, "name", None) == "TF32" and a.dtype.is_fp32() and b.dtype.is_fp32():
            a = handle(round_to_tf32(a.data), a.dtype.scalar)
            b = handle(round_to_tf32(b.data), b.dtype.scalar)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    create_dot.__qualname__ = f"{builder.__qualname__}.create_dot"
    builder.create_dot = create_dot


def _round_bf16_casts(builder: type, handle: type) -> None:
    import triton.language as tl

    original = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return handle(round_to_bf16(src.data), dst_type.scalar)
        return original(self, src, dst_type)

    cast_impl.__qualname__ = f"{builder.__qualname__}.cast_impl"
    builder.cast_impl = cast_impl


def _shuffle_programs(builder: type, rng: np.random.Generator) -> None:
    """The launch loop sets the grid once, then each index in order: the n-th index it sets
    becomes the n-th of a permutation drawn with the grid."""
    set_dim, set_idx = builder.set_grid_dim, builder.set_grid_idx
    state: dict = {"dims": (1, 1, 1), "order": np.zeros(1, dtype=np.int64)}

    def set_grid_dim(self, nx, ny, nz):
        state["dims"] = (nx, ny, nz)
        state["order"] = rng.permutation(max(1, nx * ny * nz))
        return set_dim(self, nx, ny, nz)

    def set_grid_idx(self, x, y, z):
        _, ny, nz = state["dims"]
        drawn = int(state["order"][(x * ny + y) * nz + z])
        return set_idx(self, drawn // (ny * nz), (drawn // nz) % ny, drawn % nz)

    set_grid_dim.__qualname__ = f"{builder.__qualname__}.set_grid_dim"
    set_grid_idx.__qualname__ = f"{builder.__qualname__}.set_grid_idx"
    builder.set_grid_dim, builder.set_grid_idx = set_grid_dim, set_grid_idx
