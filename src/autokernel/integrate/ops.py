"""Kernel files registered as PyTorch custom ops (``autokernel::<name>_<hash>``)."""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn

from .runfiles import IntegrateError


# ------------------------------------------------------------------ custom ops
SCHEMAS: dict[str, str] = {
    "rmsnorm": "(Tensor x, Tensor weight, float eps) -> Tensor",
    "layernorm": "(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor",
    "softmax": "(Tensor x) -> Tensor",
    "swiglu": "(Tensor gate, Tensor up) -> Tensor",
    "rotary": "(Tensor x, Tensor cos, Tensor sin) -> Tensor",
    "rotary_interleaved": "(Tensor x, Tensor cos, Tensor sin) -> Tensor",
    "rotary_pairs_to_halves": "(Tensor x, Tensor cos, Tensor sin) -> Tensor",
    "attention": "(Tensor q, Tensor k, Tensor v, bool causal, float? scale) -> Tensor",
    "attention_masked": "(Tensor q, Tensor k, Tensor v, Tensor mask, float? scale) -> Tensor",
    "attention_rotary": "(Tensor q, Tensor k, Tensor v, Tensor cos, Tensor sin, bool causal, float? scale) -> Tensor",
    "attention_softcap": "(Tensor q, Tensor k, Tensor v, Tensor mask, float? scale, float softcap) -> Tensor",
    "attention_sinks": "(Tensor q, Tensor k, Tensor v, Tensor mask, float? scale, Tensor sinks) -> Tensor",
    "attention_cross": "(Tensor q, Tensor k, Tensor v, Tensor? mask, float? scale) -> Tensor",
    "matmul": "(Tensor a, Tensor b) -> Tensor",
    "fused_mlp": "(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down) -> Tensor",
    "cross_entropy": "(Tensor logits, Tensor targets) -> Tensor",
    "reduce": "(Tensor x) -> Tensor",
    "add_rmsnorm": "(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)",
    "add_layernorm": "(Tensor x, Tensor residual, Tensor weight, Tensor bias, float eps) -> (Tensor, Tensor)",
    "gelu": "(Tensor x, bool tanh) -> Tensor",
    "geglu": "(Tensor gate, Tensor up, bool tanh) -> Tensor",
    "swiglu_packed": "(Tensor gate_up) -> Tensor",
    "geglu_packed": "(Tensor gate_up, bool tanh) -> Tensor",
    "embedding": "(Tensor ids, Tensor weight, float scale) -> Tensor",
    "rotary_table": "(Tensor position_ids, Tensor inv_freq, float scaling, Tensor like) -> (Tensor, Tensor)",
    "linear_gelu": "(Tensor x, Tensor w, Tensor b, bool tanh) -> Tensor",
    "linear_relu": "(Tensor x, Tensor w, Tensor b) -> Tensor",
    "linear_relu2": "(Tensor x, Tensor w, Tensor b) -> Tensor",
    "moe_experts": "(Tensor x, Tensor top_k_index, Tensor top_k_weights, Tensor gate_up, Tensor down) -> Tensor",
    "softcap": "(Tensor x, float cap) -> Tensor",
    "xielu": "(Tensor x, float alpha_p, float alpha_n, float beta, float eps) -> Tensor",
    "moe_experts_gptoss": ("(Tensor x, Tensor top_k_index, Tensor top_k_weights, Tensor gate_up, Tensor gate_up_bias, "
                           "Tensor down, Tensor down_bias, float alpha, float limit) -> Tensor"),
    "relative_position_bias": ("(Tensor table, int query_length, int key_length, int offset, bool bidirectional, "
                               "int max_distance) -> Tensor"),
    "shifted_windows": "(Tensor x, int height, int width, int window, int shift, int reverse) -> Tensor",
    "window_bias": "(Tensor table, Tensor index, int batch, int height, int width, int window, int shift) -> Tensor",
    "selective_scan": ("(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor D, Tensor z, Tensor delta_bias) "
                       "-> Tensor"),
    "causal_conv1d": "(Tensor x, Tensor weight, Tensor bias, int silu) -> Tensor",
}
# kinds whose op returns two tensors of one shape and dtype (``output_meta``): (normalised rows,
# sum) with the first input's, and (cos, sin)
TWO_OUTPUTS = {"add_rmsnorm", "add_layernorm", "rotary_table"}
# kinds whose op returns one tensor of the first input's shape and dtype
SAME_AS_FIRST = {"rmsnorm", "layernorm", "softmax", "swiglu", "rotary", "rotary_interleaved", "rotary_pairs_to_halves",
                 "gelu", "geglu", "moe_experts", "moe_experts_gptoss", "softcap", "xielu", "selective_scan",
                 "causal_conv1d"}


def output_meta(kind: str, args: tuple) -> tuple[tuple[int, ...], torch.dtype]:
    """Shape and dtype of the op's output (what the fake implementation promises)."""
    x = args[0]
    if kind == "rotary_table":
        return tuple(x.shape) + (2 * args[1].numel(),), args[3].dtype
    if kind in SAME_AS_FIRST or kind in TWO_OUTPUTS:
        return tuple(x.shape), x.dtype
    if kind in ("attention", "attention_masked", "attention_rotary", "attention_softcap", "attention_sinks",
                "attention_cross"):
        return tuple(x.shape[:-1]) + (args[2].shape[-1],), x.dtype
    if kind == "matmul":
        return (x.shape[0], args[1].shape[1]), x.dtype
    if kind == "fused_mlp":
        return (x.shape[0], args[3].shape[0]), x.dtype
    if kind in ("linear_gelu", "linear_relu", "linear_relu2"):
        return (x.shape[0], args[1].shape[0]), x.dtype
    if kind == "cross_entropy":
        return (), x.dtype
    if kind == "reduce":
        return tuple(x.shape[:-1]), x.dtype
    if kind == "embedding":
        return (x.numel(), args[1].shape[1]), args[1].dtype
    if kind in ("swiglu_packed", "geglu_packed"):
        return tuple(x.shape[:-1]) + (x.shape[-1] // 2,), x.dtype
    if kind == "relative_position_bias":
        return (1, x.shape[1], args[1], args[2]), x.dtype
    if kind == "shifted_windows":  # (x, height, width, window, shift, reverse)
        height, width, window, reverse = args[1], args[2], args[3], args[5]
        if reverse:
            return (x.numel() // (height * width * x.shape[-1]), height, width, x.shape[-1]), x.dtype
        return (x.shape[0] * (height // window) * (width // window), window, window, x.shape[-1]), x.dtype
    if kind == "window_bias":  # (table, index, batch, height, width, window, shift)
        batch, height, width, window, shift = args[2:7]
        rows = batch * (height // window) * (width // window) if shift else 1
        return (rows, x.shape[1], window * window, window * window), x.dtype
    raise KeyError(kind)


# op name -> number of calls of the real implementation in this process (the op runs
# eagerly even inside a compiled graph, so this counts every use)
OP_CALLS: Counter = Counter()
_OPS: dict[str, Callable[..., Any]] = {}
# op name (``<name>_<hash>``, without the namespace) -> the plan problem it was registered for
OP_PROBLEMS: dict[str, str] = {}
OP_NAMESPACE = "autokernel"


def _import_kernel(path: Path, unique: str) -> Any:
    module_name = f"autokernel_applied.{unique}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise IntegrateError(f"cannot import kernel file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


@functools.lru_cache(maxsize=None)
def _passthrough_layout(kind: str) -> Callable[[torch.Tensor], bool] | None:
    from ..problems import get_problem

    return get_problem(kind).passthrough_layout


def dense_strides_like(x: torch.Tensor) -> tuple[int, ...]:
    """The strides ``torch.empty_like(x)`` gives (and ``fake`` promises torch.compile): x's own
    when x is dense, else dense ones in x's order of dimensions."""
    return _dense_strides(tuple(x.shape), tuple(x.stride()))


@functools.lru_cache(maxsize=1024)
def _dense_strides(shape: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, ...]:
    return torch.empty_like(torch.empty_strided(shape, stride, device="meta")).stride()


def empty_in_layout_of(x: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An output in x's layout: ``torch.empty_like(x)`` where the shapes agree, else dense in x's
    order of dimensions (attention's output, Dv wide, after a q of D: heads inside tokens when
    q is a projection's view)."""
    if tuple(shape) == tuple(x.shape):
        return torch.empty_like(x, dtype=dtype)
    return torch.empty_permuted(shape, _outer_first(tuple(x.stride())), dtype=dtype, device=x.device)


def strides_in_layout_of(x: torch.Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides ``empty_in_layout_of(x, shape, ...)`` gives."""
    if tuple(shape) == tuple(x.shape):
        return dense_strides_like(x)
    return _permuted_strides(tuple(shape), _outer_first(tuple(x.stride())))


def _outer_first(stride: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(stride)), key=lambda d: -stride[d]))


@functools.lru_cache(maxsize=1024)
def _permuted_strides(shape: tuple[int, ...], order: tuple[int, ...]) -> tuple[int, ...]:
    return torch.empty_permuted(shape, order, device="meta").stride()


def keeps_layout(kind: str, args: tuple) -> bool:
    """Is the first argument passed to the kernel as it is, and the output given its layout?
    Only in the layout the problem declares (``Problem.passthrough_layout``, also judged by the
    harness); everything else is made contiguous, as in the harness."""
    return _in_layout(_passthrough_layout(kind), args[0] if args else None)


def _in_layout(accepts: Callable[[torch.Tensor], bool] | None, x: Any) -> bool:
    return accepts is not None and isinstance(x, torch.Tensor) and accepts(x)


def register_kernel_op(kind: str, name: str, path: Path) -> tuple[str, Callable[..., Any]]:
    """Import ``path`` and register its ``kernel_fn`` as ``autokernel::<name>_<hash>``.
    Registering the same file twice returns the same op."""
    if kind not in SCHEMAS:
        raise IntegrateError(f"no custom-op schema for kind {kind!r}")
    source = Path(path).read_bytes()
    digest = hashlib.sha1(kind.encode() + b"\0" + source).hexdigest()[:10]
    opname = f"{re.sub(r'[^0-9A-Za-z_]', '_', name)}_{digest}"
    if opname in _OPS:
        return opname, _OPS[opname]
    module = _import_kernel(Path(path), opname)
    kernel_fn = getattr(module, "kernel_fn", None)
    if not callable(kernel_fn):
        raise IntegrateError(f"{path} defines no callable kernel_fn")

    accepts = _passthrough_layout(kind)
    two_outputs = kind in TWO_OUTPUTS

    # host time per call matters (a forward from idle waits for the host's first launches), so
    # what does not depend on the call is looked up once, here
    def impl(*args):
        OP_CALLS[opname] += 1
        shape, dtype = output_meta(kind, args)
        x = args[0]
        keep = _in_layout(accepts, x)
        if keep:
            call_args = [a if not isinstance(a, torch.Tensor) or i == 0 or accepts(a) else a.contiguous()
                         for i, a in enumerate(args)]
        else:
            call_args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        out = kernel_fn(*call_args)
        if two_outputs:
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise RuntimeError(f"kernel {path} returned {type(out).__name__}, expected two tensors of shape {shape}")
            return tuple(_checked(o, shape, dtype, path).contiguous() for o in out)
        out = _checked(out, shape, dtype, path)
        if keep:  # the layout `fake` promised torch.compile: x's
            if out.stride() != strides_in_layout_of(x, shape):
                out = empty_in_layout_of(x, shape, dtype).copy_(out)
        elif not out.is_contiguous():
            out = out.contiguous()
        return out

    def fake(*args):
        shape, dtype = output_meta(kind, args)
        if kind in TWO_OUTPUTS:
            return args[0].new_empty(shape, dtype=dtype), args[0].new_empty(shape, dtype=dtype)
        if keeps_layout(kind, args):
            return empty_in_layout_of(args[0], shape, dtype)
        return args[0].new_empty(shape, dtype=dtype)

    op = torch.library.custom_op(f"{OP_NAMESPACE}::{opname}", impl, mutates_args=(), schema=SCHEMAS[kind])
    op.register_fake(fake)

    def call(*args):
        # The dispatcher's Python path costs more host time than a Triton launch (measured
        # 6-17 µs a call on the H200's host, benchmarks/op_overhead_gpu.py): plain eager calls
        # skip it; tracing, compiling, profiling, modes and tensor subclasses go through the op.
        if not needs_dispatcher(args):
            return impl(*args)
        if traced_as_original(call):  # compile_policy.py: inductor compiles the eager op
            return TRACED_UNDER_COMPILE[opname](*args)
        return op(*args)

    call.opname = opname
    _OPS[opname] = call
    OP_PROBLEMS[opname] = name
    return opname, call


# op name -> the problem's eager op, traced in its place while torch.compile traces (compile_policy.py)
TRACED_UNDER_COMPILE: dict[str, Callable[..., Any]] = {}


def traced_as_original(op: Callable[..., Any]) -> bool:
    """Is torch.compile tracing now, with the problem's eager op handed to inductor in ``op``'s place
    (compile_policy.py)?  Then a switched place computes what the model's own code did, in the
    model's own shapes, so that inductor compiles the original's graph (the point of handing it
    over)."""
    return torch.compiler.is_compiling() and getattr(op, "opname", None) in TRACED_UNDER_COMPILE


def rows(op: Callable[..., Any], t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` as the rows of ``n`` elements that a row-wise kernel takes, for a call of ``op``; ``t``
    as it is when ``traced_as_original(op)`` (the eager ops work on the last dimension).  A reshape
    there let inductor turn the residual add of a GEMM's output into cuBLAS addmm and split the
    add from its norm: in the LLaMA example 4 addmm and 2 more kernels for 2 layers on the CPU.
    (On the H200 torch.compile of that patched model ran 3% slower than of the original; the
    run with this fix is still to be made.)"""
    return t if traced_as_original(op) else t.reshape(-1, n)


def needs_dispatcher(args: tuple) -> bool:
    """Must a call of our op go through the registered custom op (not straight to the kernel)?
    Yes under torch.compile / export, a dispatch or function mode (fake tensors, the profiler's
    and the user's modes), the profiler (its records name our ops: the time breakdown reads
    them), for tensor subclasses, and when autograd would record the call."""
    if (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
            or torch._C._is_torch_function_mode_enabled() or torch.autograd._profiler_enabled()):
        return True
    grad = torch.is_grad_enabled()
    for a in args:  # a loop, not any() over a generator: a third of this function's host time
        if isinstance(a, torch.Tensor) and (type(a) not in _PLAIN_TENSORS or grad and a.requires_grad):
            return True
    return False


_PLAIN_TENSORS = (torch.Tensor, nn.Parameter)


def _checked(out: Any, shape: tuple[int, ...], dtype: torch.dtype, path: Path) -> torch.Tensor:
    if not isinstance(out, torch.Tensor) or out.shape != shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise RuntimeError(f"kernel {path} returned {got}, expected a tensor of shape {shape}")
    return out if out.dtype == dtype else out.to(dtype)


def op_problems(model: nn.Module | None = None) -> dict[str, str]:
    """Qualified op name as the profiler shows it (``autokernel::<name>_<hash>``) -> plan
    problem name: every op registered in this process, and (winning over them) the ops
    ``apply`` put into ``model``."""
    out = {f"{OP_NAMESPACE}::{op}": name for op, name in OP_PROBLEMS.items()}
    for name, op in dict(getattr(model, "_autokernel_ops", {}) or {}).items():
        out[f"{OP_NAMESPACE}::{op}"] = name
    return out
