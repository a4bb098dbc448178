"""Appliers for linears and convolutions run as GEMMs (matmul) and SwiGLU MLPs (swiglu, fused_mlp)."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn

from ..recognize import MLP_NAMES, is_silu_module, linear_dims, patch_conv_kernel, window_conv1d_parts
from .conv_windows import as_conv_output, window_rows
from .ops import rows
from .patching import (_check_probe, _class_code_names, _pick, _probe, _probe_input, _reference, _related,
                       _swap_class, dtype_reason)
from .row_adds import apply_row_adds
from .selection import KernelOp


# ------------------------------------------------------------------ linears
def _linear_members(k: KernelOp, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x):
        wt = self._autokernel_weight_t
        if x.dtype == dtype and x.shape[-1] == wt.shape[0] and x.numel() > 0:
            out = op(x.reshape(-1, wt.shape[0]), wt)
            if self.bias is not None:
                out = out + self.bias
            return out.reshape(*x.shape[:-1], wt.shape[1])
        return base_forward(self, x)

    return {"forward": forward}


def _patch_conv_members(k: KernelOp, kh: int, kw: int) -> dict[str, Any]:
    """A patch convolution (stride = kernel, no padding) as the GEMM of its patches by the
    weight: the output is that GEMM's rows seen as [B, out, H/kh, W/kw] (channels last in
    memory; ViT flattens and transposes it back to rows without a copy)."""
    op, dtype = k.op, k.dtype

    def forward(self, x):
        wt = self._autokernel_weight_t
        if (x.dtype == dtype and x.dim() == 4 and x.shape[1] * kh * kw == wt.shape[0] and x.numel() > 0
                and x.shape[2] % kh == 0 and x.shape[3] % kw == 0):
            b, c, h, w = x.shape
            ph, pw = h // kh, w // kw
            patches = x.reshape(b, c, ph, kh, pw, kw).permute(0, 2, 4, 1, 3, 5).reshape(b * ph * pw, c * kh * kw)
            out = op(patches, wt)
            if self.bias is not None:
                out = out + self.bias
            return out.reshape(b, ph, pw, wt.shape[1]).permute(0, 3, 1, 2)
        return nn.Conv2d.forward(self, x)

    return {"forward": forward}


def _window_conv1d_members(k: KernelOp, kernel: int, stride: int, padding: int) -> dict[str, Any]:
    """A Conv1d as the GEMM of its windows: the input padded with zeros, unfolded to
    [B*L_out, C*kernel] (one copy, ``kernel/stride`` times the input), times the weight
    [C*kernel, out]; the output is that GEMM's rows seen as [B, out, L_out] (channels last in
    memory: Whisper's ``permute(0, 2, 1)`` after its stems then takes them without a copy)."""
    op, dtype = k.op, k.dtype

    def forward(self, x):
        wt = self._autokernel_weight_t
        if x.dtype == dtype and x.dim() == 3 and x.shape[1] * kernel == wt.shape[0] and x.numel() > 0:
            windows = window_rows(x, kernel, stride, padding)
            if windows is not None:
                matrix, b, l_out = windows
                out = op(matrix, wt)
                if self.bias is not None:
                    out = out + self.bias
                return as_conv_output(out, b, l_out)
        return nn.Conv1d.forward(self, x)

    return {"forward": forward}


def _computes_linear(m: nn.Module, probed: dict) -> bool:
    """``nn.Linear``, or a subclass whose own forward computes it too (Falcon's ``FalconLinear``:
    ``x @ W.T + b``), by one probe per class."""
    if not isinstance(m, nn.Linear):
        return False
    if type(m).forward is nn.Linear.forward:
        return True
    key = (type(m), "linear")
    if key not in probed:
        probed[key] = _probe(m, type(m), _probe_input(m.in_features, m, m.weight.dtype),
                             lambda x: nn.functional.linear(x, m.weight, m.bias))
    return probed[key]


def _computes_conv1d(m: nn.Module, probed: dict) -> bool:
    """GPT-2's ``Conv1D`` (``x @ W + b``, W stored [K, N]), by one probe per class."""
    dims = linear_dims(m)
    if dims is None or not dims[2]:
        return False
    key = (type(m), "conv1d")
    if key not in probed:
        probed[key] = _probe(m, type(m), _probe_input(dims[0], m, m.weight.dtype), lambda x: x @ m.weight + m.bias)
    return probed[key]


def _gemm_modules(problem) -> list[str]:
    """The problem's modules that ran a GEMM: not those listed only for a row added in their
    forward (``row_adds``; no GEMM call of theirs is recorded), which would relate every linear
    inside them, run or not, to the problem.  All of them where the plan records no calls."""
    calls = problem.module_calls
    return [m for m in problem.modules if not calls or m in calls]


def _apply_matmul(model, k, done, replaced, skipped, probed) -> None:
    """Switch the linears (and patch and window convolutions) of ``k``'s problem; then rewrite the forwards
    that add a row onto a switched linear's output (``row_adds``: the LM head's
    ``final_logits_bias``)."""
    switched: set[int] = set()
    gemms = _gemm_modules(k.problem)
    for name, m in model.named_modules():
        if id(m) in done or not (name in gemms or _related(name, gemms)):
            continue
        linear = _computes_linear(m, probed)
        conv1d = not linear and _computes_conv1d(m, probed)
        patches = patch_conv_kernel(m) if type(m).forward is nn.Conv2d.forward else None
        windows = window_conv1d_parts(m)
        if not (linear or conv1d or patches or windows):
            continue
        if m.weight.dtype != k.dtype:
            skipped.append((name, dtype_reason("matmul", m.weight.dtype, k.dtype)))
            continue
        # The kernel takes b[K, N]: keep a contiguous transposed copy of nn.Linear's [N, K] weight
        # (inference only: later changes of the weight are not seen); Conv1D's is [K, N] already.
        weight = m.weight.detach()
        m.register_buffer("_autokernel_weight_t", weight.contiguous() if conv1d else
                          weight.reshape(weight.shape[0], -1).t().contiguous(), persistent=False)
        if linear or conv1d:
            _swap_class(m, ("matmul", k.identity), _linear_members(k, type(m)))
        elif windows:
            _swap_class(m, ("matmul", k.identity, windows), _window_conv1d_members(k, *windows))
        else:
            _swap_class(m, ("matmul", k.identity, patches), _patch_conv_members(k, *patches))
        done.add(id(m))
        switched.add(id(m))
        replaced.append((name, "matmul"))
    if switched:
        apply_row_adds(model, k, switched, replaced, probed)


# ------------------------------------------------------------------ MLP (swiglu / fused_mlp)
_GATE_NAMES, _UP_NAMES, _DOWN_NAMES = MLP_NAMES["gate"], MLP_NAMES["up"], MLP_NAMES["down"]


def _find_linear(module: nn.Module, names: tuple[str, ...]) -> str | None:
    for n in names:
        if isinstance(getattr(module, n, None), nn.Linear):
            return n
    return None



def _mlp_parts(m: nn.Module) -> tuple[str, str, str] | None:
    if isinstance(m, nn.Linear):
        return None
    g, u, d = _find_linear(m, _GATE_NAMES), _find_linear(m, _UP_NAMES), _find_linear(m, _DOWN_NAMES)
    if not (g and u and d) or len({g, u, d}) != 3:
        return None
    silu = "silu" in _class_code_names(type(m)) or any(is_silu_module(c) for c in m.children())
    return (g, u, d) if silu else None


def _mlp_members(k: KernelOp, parts: tuple[str, str, str], d_in: int, fused: bool, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    g, u, d = parts
    base_forward = base.forward

    def forward(self, x, *args, **kwargs):
        if not args and not kwargs and x.dtype == dtype and x.shape[-1] == d_in and x.numel() > 0:
            x2 = x.reshape(-1, d_in) if fused else rows(op, x, d_in)
            if fused:
                out = op(x2, getattr(self, g).weight, getattr(self, u).weight, getattr(self, d).weight)
            else:
                out = getattr(self, d)(op(getattr(self, g)(x2), getattr(self, u)(x2)))
            return out.reshape(*x.shape[:-1], out.shape[-1])
        return base_forward(self, x, *args, **kwargs)

    return {"forward": forward}


def _mlp_expected(m: nn.Module, parts: tuple[str, str, str]) -> Callable[[torch.Tensor], torch.Tensor]:
    swiglu = _reference("swiglu")
    g, u, d = (getattr(m, p) for p in parts)
    return lambda x: d(swiglu(g(x), u(x)))


def _apply_mlp(model, k, done, replaced, skipped, probed) -> None:
    fused = k.kind == "fused_mlp"
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], k.kind, name) is None:
            continue
        parts = _mlp_parts(m)
        if parts is None:
            continue
        lins = [getattr(m, p) for p in parts]
        if any(lin.weight.dtype != k.dtype for lin in lins):
            skipped.append((name, f"{k.kind}: linear weights are not {k.dtype}"))
            continue
        if fused and any(lin.bias is not None for lin in lins):
            skipped.append((name, "fused_mlp: the linears have biases"))
            continue
        d_in = lins[0].in_features
        base = type(m)
        if not _check_probe(base, m, k, probed, _probe_input(d_in, m, k.dtype), _mlp_expected(m, parts)):
            skipped.append((name, f"{k.kind}: {base.__name__} computes something else (probe mismatch)"))
            continue
        _swap_class(m, (k.kind, k.identity, parts, d_in), _mlp_members(k, parts, d_in, fused, base))
        done.add(id(m))
        replaced.append((name, k.kind))
