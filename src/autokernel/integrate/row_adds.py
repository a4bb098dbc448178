"""A row added onto a switched linear's output in its parent's forward, part of the matmul
problem: the bias-free LM head and its ``final_logits_bias`` buffer ([1, V]) of Marian,
Pegasus, mBART and LED (``lm_logits = self.lm_head(h) + self.final_logits_bias``) and BART
(``lm_logits = self.lm_head(h)`` then ``lm_logits = lm_logits +
self.final_logits_bias.to(lm_logits.device)``).

The parent's forward source is rewritten (``rewrite``): the expression, or the two statements
(which reassign one name), become ``_autokernel_linear_row(self, "<linear>", "<row>", h,
to_device)``, which calls the linear (switched by the matmul applier: the op makes a fresh
[T, V] output) and adds the row to that output in place.  The matmul op takes no bias
(``(Tensor a, Tensor b) -> Tensor``), so the row cannot go into the GEMM's epilogue: the
in-place add still reads and writes the logits once (T*V elements each way, plus the row), as
the original add did, but allocates no second [T, V] tensor.

Only a linear child the matmul applier switched, and a buffer or parameter of the parent of
shape [N] or [1, N] in the op's dtype, are taken.  The helper adds in place only for calls
that compute the same as the original: eval mode, no autograd recording, the row a tensor of
the output's dtype and device that broadcasts onto it without changing its shape; any other
call runs ``linear(h) + row`` as written (``.to(device)`` where the original moved the row).
"""
from __future__ import annotations

import ast
import inspect
import math
import types
from typing import Any

import torch
import torch.nn as nn

from .patching import _pick, _swap_class, rewrap
from .rewrite import compile_forward, parse_forward, statement_lists
from .selection import KernelOp

ROW_HELPER = "_autokernel_linear_row"
# what ``replaced`` says of a rewritten forward: it places the matmul problem's share at that
# module (the row add), not the GEMMs of the modules inside it (``placement._placed_at``)
ROW_ADD = "matmul (row add)"
SCALE_HELPER = "_autokernel_linear_scale"
SCALED = "matmul (scaled)"  # the same, for a linear's output scaled by a number (``linear_scale_call``)


def linear_row_call(module: nn.Module, lin_name: str, row_name: str, x: Any, to_device: bool) -> Any:
    """``module.<lin>(x) + module.<row>`` (the row ``.to`` the output's device where
    ``to_device``), the row added in place onto the linear's fresh output where that computes
    the same."""
    y = getattr(module, lin_name)(x)
    row = getattr(module, row_name)
    if to_device and isinstance(y, torch.Tensor) and isinstance(row, torch.Tensor):
        row = row.to(y.device)
    if (not module.training and type(y) is torch.Tensor and isinstance(row, torch.Tensor)
            and row.dtype == y.dtype and row.device == y.device and 1 <= row.dim() <= y.dim()
            and row.numel() == row.shape[-1] == y.shape[-1] and y.numel() > 0
            and not (torch.is_grad_enabled() and (y.requires_grad or row.requires_grad))):
        return y.add_(row)
    return y + row


def linear_scale_call(module: nn.Module, lin_name: str, x: Any, scale: Any, divide: bool) -> Any:
    """``module.<lin>(x) / scale`` (``* scale`` where not ``divide``) for a Python number
    ``scale``: the linear's input scaled instead where it is narrower than the output (K < N, an
    LM head: a [T, K] pass for a [T, N] one; exact for a power of two, else one rounding of the
    input for one of the output) and the linear has no bias (GPT-2's ``Conv1D`` always has one),
    else its fresh output scaled in place.  Any other call (a
    tensor scale, training, autograd recording, an input that is no plain tensor) runs as
    written."""
    lin = getattr(module, lin_name)
    wt = getattr(lin, "_autokernel_weight_t", None)
    if (module.training or not isinstance(scale, (int, float)) or isinstance(scale, bool)
            or not math.isfinite(scale) or scale == 0 or type(x) is not torch.Tensor or not x.is_floating_point()
            or not isinstance(wt, torch.Tensor) or wt.dim() != 2 or x.shape[-1:] != wt.shape[:1]
            or (torch.is_grad_enabled() and (x.requires_grad or wt.requires_grad))):
        y = lin(x)
        return y / scale if divide else y * scale
    if wt.shape[0] < wt.shape[1] and getattr(lin, "bias", None) is None:  # a bias takes the scale too: not the input
        return lin(x / scale if divide else x * scale)
    y = lin(x)
    if type(y) is not torch.Tensor or not y.is_floating_point():
        return y / scale if divide else y * scale
    return y.div_(scale) if divide else y.mul_(scale)


def _self_attr(node: ast.AST, self_name: str) -> str | None:
    """``attr`` of ``self.attr``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == self_name:
        return node.attr
    return None


def _linear_call(node: ast.AST, self_name: str, linears: set[str]) -> tuple[str, ast.expr] | None:
    """(linear, argument) of ``self.<linear>(argument)``: one positional argument, no keywords."""
    if (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
            and not isinstance(node.args[0], ast.Starred)):
        name = _self_attr(node.func, self_name)
        if name in linears:
            return name, node.args[0]
    return None


def _row(node: ast.AST, self_name: str, rows: set[str], device_of: str | None) -> tuple[str, bool] | None:
    """(row, to_device) of ``self.<row>``, or of ``self.<row>.to(<device_of>.device)``."""
    name = _self_attr(node, self_name)
    if name in rows:
        return name, False
    if (device_of is not None and isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
            and isinstance(node.func, ast.Attribute) and node.func.attr == "to"):
        name, arg = _self_attr(node.func.value, self_name), node.args[0]
        if (name in rows and isinstance(arg, ast.Attribute) and arg.attr == "device"
                and isinstance(arg.value, ast.Name) and arg.value.id == device_of):
            return name, True
    return None


def _helper_call(self_name: str, lin: str, row: str, arg: ast.expr, to_device: bool) -> ast.Call:
    return ast.Call(func=ast.Name(ROW_HELPER, ast.Load()),
                    args=[ast.Name(self_name, ast.Load()), ast.Constant(lin), ast.Constant(row), arg,
                          ast.Constant(to_device)], keywords=[])


class _LinearPlusRow(ast.NodeTransformer):
    """``self.<linear>(e) + self.<row>`` -> the helper's call."""

    def __init__(self, self_name: str, linears: dict[str, set[str]]):
        self.self_name, self.linears, self.found = self_name, linears, set()

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        call = _linear_call(node.left, self.self_name, set(self.linears)) if isinstance(node.op, ast.Add) else None
        row = _row(node.right, self.self_name, self.linears[call[0]], None) if call else None
        if row is None:
            return node
        self.found.add((call[0], row[0]))
        return ast.copy_location(_helper_call(self.self_name, call[0], row[0], call[1], False), node)


def _scale_expr(node: ast.AST, self_name: str) -> bool:
    """A number written out, or ``self.<a>`` / ``self.<a>.<b>...`` (Granite's
    ``self.config.logits_scaling``, Cohere's ``self.logit_scale``): read once, no call."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    while isinstance(node, ast.Attribute):
        node = node.value
        if isinstance(node, ast.Name):
            return node.id == self_name
    return False


def _scale_call(self_name: str, lin: str, arg: ast.expr, scale: ast.expr, divide: bool) -> ast.Call:
    return ast.Call(func=ast.Name(SCALE_HELPER, ast.Load()),
                    args=[ast.Name(self_name, ast.Load()), ast.Constant(lin), arg, scale, ast.Constant(divide)],
                    keywords=[])


class _LinearScaled(ast.NodeTransformer):
    """``self.<linear>(e) / <scale>`` or ``* <scale>`` (``_scale_expr``) -> the scale helper's call."""

    def __init__(self, self_name: str, linears: set[str]):
        self.self_name, self.linears, self.found = self_name, linears, set()

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        scaling = isinstance(node.op, (ast.Mult, ast.Div))
        call = _linear_call(node.left, self.self_name, self.linears) if scaling else None
        if call is None or not _scale_expr(node.right, self.self_name):
            return node
        divide = isinstance(node.op, ast.Div)
        self.found.add((call[0], "/" if divide else "*"))
        return ast.copy_location(_scale_call(self.self_name, call[0], call[1], node.right, divide), node)


def _fuse_scale_statements(body: list[ast.stmt], self_name: str, linears: set[str], found: set) -> None:
    """``v = self.<linear>(e)`` directly followed by ``v = v / <scale>`` or ``v = v * <scale>``
    -> ``v = helper(...)``."""
    i = 0
    while i + 1 < len(body):
        first, second = body[i], body[i + 1]
        name = _one_name(first)
        call = _linear_call(first.value, self_name, linears) if name else None
        op = second.value if call and _one_name(second) == name else None
        if (isinstance(op, ast.BinOp) and isinstance(op.op, (ast.Mult, ast.Div)) and isinstance(op.left, ast.Name)
                and op.left.id == name and _scale_expr(op.right, self_name)):
            divide = isinstance(op.op, ast.Div)
            first.value = _scale_call(self_name, call[0], call[1], op.right, divide)
            del body[i + 1]
            found.add((call[0], "/" if divide else "*"))
        i += 1


def _one_name(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def _fuse_statements(body: list[ast.stmt], self_name: str, linears: dict[str, set[str]], found: set) -> None:
    """``v = self.<linear>(e)`` directly followed by ``v = v + self.<row>`` (or ``v = v +
    self.<row>.to(v.device)``) -> ``v = helper(...)``."""
    i = 0
    while i + 1 < len(body):
        first, second = body[i], body[i + 1]
        name = _one_name(first)
        call = _linear_call(first.value, self_name, set(linears)) if name else None
        add = second.value if call and _one_name(second) == name else None
        row = None
        if (isinstance(add, ast.BinOp) and isinstance(add.op, ast.Add) and isinstance(add.left, ast.Name)
                and add.left.id == name):
            row = _row(add.right, self_name, linears[call[0]], name)
        if row is not None:
            first.value = _helper_call(self_name, call[0], row[0], call[1], row[1])
            del body[i + 1]
            found.add((call[0], row[0]))
        i += 1


def rewritten_forward(cls: type, linears: dict[str, set[str]],
                      scaled: frozenset[str] = frozenset()) -> tuple[Any, set[tuple[str, str]]] | None:
    """``cls.forward`` with each ``self.<linear>(e) + <row>`` of ``linears`` (linear -> the rows
    that may be added to it) calling the helper, and each ``self.<linear>(e) / <scale>`` (or
    ``*``) of ``scaled`` the scale helper; the (linear, row) pairs it found, ``"/"`` or ``"*"``
    for a scale; None where it has none (or no source)."""
    inner = inspect.unwrap(cls.forward)
    parsed = parse_forward(inner) if isinstance(inner, types.FunctionType) else None
    if parsed is None:
        return None
    tree, fdef = parsed
    self_name, found = fdef.args.args[0].arg, set()
    for body in list(statement_lists(fdef)):
        if linears:
            _fuse_statements(body, self_name, linears, found)
        if scaled:
            _fuse_scale_statements(body, self_name, set(scaled), found)
    for visitor in ([_LinearPlusRow(self_name, linears)] if linears else []) + \
            ([_LinearScaled(self_name, set(scaled))] if scaled else []):
        visitor.visit(fdef)
        found |= visitor.found
    if not found:
        return None
    helpers = {ROW_HELPER: linear_row_call, SCALE_HELPER: linear_scale_call}
    new = rewrap(cls.forward, compile_forward(inner, tree, helpers))
    return (new, found) if new is not None else None


def _rows_of(m: nn.Module, n: int, dtype: torch.dtype) -> set[str]:
    """``m``'s own buffers and parameters that are a row of width ``n`` in ``dtype``."""
    tensors = {**m._parameters, **m._buffers}
    return {name for name, t in tensors.items()
            if isinstance(t, torch.Tensor) and t.dtype == dtype and tuple(t.shape) in ((n,), (1, n))}


def _a_linear(m: nn.Module) -> bool:
    """An ``nn.Linear`` or GPT-2's ``Conv1D`` (not a patch convolution, whose output is [B, N, H, W])."""
    return isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D"


def apply_row_adds(model: nn.Module, k: KernelOp, switched: set[int], replaced: list[tuple[str, str]],
                   probed: dict) -> None:
    """Rewrite the forward of each module of ``model`` that adds one of its rows onto the output
    of a linear child the matmul applier ``switched`` (by id)."""
    for name, m in model.named_modules():
        if _pick([k], "matmul", name) is None:
            continue
        linears, scaled = {}, set()
        for child_name, child in m.named_children():
            wt = getattr(child, "_autokernel_weight_t", None)  # [K, N], kept by the matmul applier
            if id(child) in switched and _a_linear(child) and isinstance(wt, torch.Tensor) and wt.dim() == 2:
                rows = _rows_of(m, wt.shape[1], k.dtype)
                if rows:
                    linears[child_name] = rows
                calls = k.problem.module_calls
                if name in k.problem.modules and calls and name not in calls:
                    scaled.add(child_name)  # listed with no GEMM call: the profiler paired a row or a scale here
        if not linears and not scaled:
            continue
        key = (type(m), "matmul rows", k.identity, tuple(sorted((lin, tuple(sorted(r))) for lin, r in linears.items())),
               tuple(sorted(scaled)))
        if key not in probed:
            probed[key] = rewritten_forward(type(m), linears, frozenset(scaled))
        if probed[key] is None:
            continue
        forward, found = probed[key]
        _swap_class(m, ("matmul rows", k.identity, tuple(sorted(found))), {"forward": forward})
        if any(row not in ("/", "*") for _, row in found):
            replaced.append((name, ROW_ADD))
        if any(row in ("/", "*") for _, row in found):
            replaced.append((name, SCALED))
