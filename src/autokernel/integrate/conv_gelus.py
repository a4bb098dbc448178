"""Applier for ``F.gelu(self.<conv>(e))`` in a forward (Whisper's encoder stems,
``nn.functional.gelu(self.conv1(input_features))``): the Conv1d run as the GEMM of its windows
(``conv_windows``) with the GELU in the ``linear_gelu`` op's epilogue, as the profiler plans it
(``recognize_window_convs``).  The forward's source is rewritten: each such call, the
convolution a plain ``nn.Conv1d`` of one group, no dilation and zero padding
(``recognize.window_conv1d_parts``) in the op's dtype, becomes ``conv_gelu_call``, which runs the
op (weight [out, C, kernel] seen as [out, C*kernel], the module's bias or zeros) and gives the
output back as [B, out, L_out], channels last in memory; in training, for another dtype or
channel count, or where no window fits, ``F.gelu(conv(e))`` as written.  Only the erf form is
taken (``F.gelu(v)``, or with ``approximate="none"``; the profiler pairs no other).  Each
convolution is probed first: the reference of its windows' GEMM with the GELU must give
``F.gelu(conv(x))``."""
from __future__ import annotations

import ast
import inspect
import types
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..recognize import window_conv1d_parts
from .conv_windows import as_conv_output, window_rows
from .epilogues import _resolve, _self_call
from .patching import PROBE_TOLERANCE, _reference, _rel_error, _swap_class, rewrap
from .rewrite import compile_forward, parse_forward
from .selection import KernelOp

HELPER = "_autokernel_conv_gelu"  # the name a rewritten forward calls ``conv_gelu_call`` by
PAIRS = "_autokernel_conv_gelu_pairs"  # class attribute: conv child -> (op, dtype, (kernel, stride, padding))
ZERO_BIAS = "_autokernel_zero_bias"


def _weight_bias(conv: nn.Conv1d) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's w[out, C*kernel] (a view of the weight) and b[out] (the bias, or zeros kept once)."""
    weight = conv.weight.reshape(conv.weight.shape[0], -1)
    return weight, conv.bias if conv.bias is not None else getattr(conv, ZERO_BIAS)


def conv_gelu_call(module: nn.Module, conv_name: str, x: Any) -> Any:
    """``F.gelu(module.<conv>(x))``, through the op for the calls it was judged on."""
    conv = getattr(module, conv_name)
    fused = getattr(type(module), PAIRS, {}).get(conv_name)
    if (fused is not None and not module.training and isinstance(x, torch.Tensor) and x.dtype == fused[1]
            and x.dim() == 3 and x.shape[1] == conv.in_channels and x.numel() > 0):
        op, _, (kernel, stride, padding) = fused
        windows = window_rows(x, kernel, stride, padding)
        if windows is not None:
            matrix, b, l_out = windows
            return as_conv_output(op(matrix, *_weight_bias(conv), False), b, l_out)
    return F.gelu(conv(x))


def _lowering_matches(conv: nn.Conv1d, parts: tuple[int, int, int], dtype: torch.dtype) -> bool:
    """Does the reference of the windows' GEMM with the GELU give ``F.gelu(conv(x))`` on a probe?"""
    kernel, stride, padding = parts
    gen = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(2, conv.in_channels, 2 * kernel + stride + 3, generator=gen).to(conv.weight.device, dtype)
    with torch.no_grad():
        want = F.gelu(conv(x))
        matrix, b, l_out = window_rows(x, kernel, stride, padding)
        bias = conv.bias if conv.bias is not None else torch.zeros_like(conv.weight[:, 0, 0])
        got = as_conv_output(_reference("linear_gelu")(matrix, conv.weight.reshape(conv.out_channels, -1), bias, False),
                             b, l_out)
    return got.shape == want.shape and _rel_error(want, got) <= PROBE_TOLERANCE.get(dtype, 1e-4)


class _GeluOfConv(ast.NodeTransformer):
    """``F.gelu(self.<conv>(e))`` (any spelling of the function in the forward's globals, one
    positional argument, no keyword but ``approximate="none"``) -> ``_autokernel_conv_gelu(self, "<conv>", e)``."""

    def __init__(self, self_name: str, namespace: dict[str, Any], convs: set[str]):
        self.self_name, self.namespace, self.convs, self.found = self_name, namespace, convs, set()

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        exact = all(kw.arg == "approximate" and isinstance(kw.value, ast.Constant) and kw.value.value == "none"
                    for kw in node.keywords)
        if (len(node.args) != 1 or not exact or isinstance(node.args[0], ast.Starred)
                or _resolve(node.func, self.namespace) is not F.gelu):
            return node
        inner = _self_call(node.args[0], self.self_name)
        if inner is None or inner[0] not in self.convs:
            return node
        self.found.add(inner[0])
        return ast.Call(func=ast.Name(HELPER, ast.Load()),
                        args=[ast.Name(self.self_name, ast.Load()), ast.Constant(inner[0]), inner[1]], keywords=[])


def rewrite_conv_gelus(m: nn.Module, k: KernelOp, done: set[int], probed: dict) -> bool:
    """Rewrite ``m``'s forward so that its ``F.gelu(self.<conv>(e))`` calls run ``k``'s op; False
    (``m`` left alone) when it has none the op takes."""
    convs = {}
    for name, child in m.named_children():
        parts = window_conv1d_parts(child)
        if (parts is None or id(child) in done or child.weight.dtype != k.dtype
                or child.bias is not None and child.bias.dtype != k.dtype):
            continue
        key = (type(child), "conv gelu", parts, id(child))
        if key not in probed:
            probed[key] = _lowering_matches(child, parts, k.dtype)
        if probed[key]:
            convs[name] = parts
    fn = type(m).forward
    inner = inspect.unwrap(fn)
    parsed = parse_forward(inner) if convs and isinstance(inner, types.FunctionType) else None
    if parsed is None:
        return False
    tree, fdef = parsed
    visitor = _GeluOfConv(fdef.args.args[0].arg, inner.__globals__, set(convs))
    visitor.visit(fdef)
    new = rewrap(fn, compile_forward(inner, tree, {HELPER: conv_gelu_call})) if visitor.found else None
    if new is None:
        return False
    pairs = {name: (k.op, k.dtype, convs[name]) for name in sorted(visitor.found)}
    for name in pairs:
        conv = getattr(m, name)
        if conv.bias is None and ZERO_BIAS not in conv._buffers:
            conv.register_buffer(ZERO_BIAS, torch.zeros(conv.out_channels, dtype=conv.weight.dtype,
                                                        device=conv.weight.device), persistent=False)
        done.add(id(conv))
    _swap_class(m, ("conv gelu", k.identity, tuple(sorted((n, p[2]) for n, p in pairs.items()))),
                {"forward": new, PAIRS: pairs})
    return True
