"""Applier for ``shifted_windows``: a Swin layer's forward (transformers' ``SwinLayer``, found by
``recognize_windows.is_shifted_window_layer``) rewritten so that its window data movement is two
op calls.

In the forward's source (as an earlier applier may have rewritten it: the residual adds)::

    window_partition(self.cyclic_shift(x), self.window_size)
        -> _ak_window_partition(self, x, window_partition)           # op(x, Hp, Wp, window, shift, 0)
    self.cyclic_shift(window_reverse(a, self.window_size, hp, wp), reverse=True)
        -> _ak_window_reverse(self, a, hp, wp, window_reverse)       # op(a, hp, wp, window, shift, 1)
    self.maybe_pad(x, height, width)
        -> _ak_maybe_pad(self, x, height, width)

``shift`` is the layer's ``shift_size`` where it is positive (``cyclic_shift`` rolls only then),
else 0, and ``window`` its ``window_size``, both read at each call (``set_shift_and_window_size``
changes them for a small input).  ``_ak_maybe_pad`` hands ``x`` itself on, with zero pads, where
the grid is a multiple of the window already (``maybe_pad``'s ``F.pad`` by zeros is a copy of the
same values; nothing writes that tensor afterwards: the partition reads it, the rest reads its
shape and dtype); a grid that needs padding is padded by the layer's own ``maybe_pad``.  Both
rewrites must be found, or the class is left alone.  A call the op was not judged on (another
dtype, a window size that is a tensor while tracing, torch.compile handing the eager op to
inductor) runs the layer's own code.
"""
from __future__ import annotations

import ast
import inspect
import types
from typing import Any, Callable

import torch

from ..recognize_windows import is_shifted_window_layer
from .ops import traced_as_original
from .patching import apply_rewritten_members, rewrap
from .rewrite import compile_forward, parse_forward

PARTITION, REVERSE, PAD = "_ak_window_partition", "_ak_window_reverse", "_ak_maybe_pad"


def window_helpers(k: Any) -> dict[str, Callable[..., Any]]:
    op, dtype = k.op, k.dtype

    def usable(layer: Any, x: Any) -> bool:
        return (isinstance(x, torch.Tensor) and x.dtype == dtype and x.numel() > 0
                and type(layer.window_size) is int and type(layer.shift_size) is int and layer.window_size > 0
                and not traced_as_original(op))

    def shift_of(layer: Any) -> int:
        return layer.shift_size if layer.shift_size > 0 else 0

    def partition(layer: Any, x: Any, window_partition: Callable) -> Any:
        if usable(layer, x) and x.dim() == 4 and x.shape[1] % layer.window_size == 0 \
                and x.shape[2] % layer.window_size == 0:
            return op(x, x.shape[1], x.shape[2], layer.window_size, shift_of(layer), 0)
        return window_partition(layer.cyclic_shift(x), layer.window_size)

    def reverse(layer: Any, windows: Any, height: Any, width: Any, window_reverse: Callable) -> Any:
        if (usable(layer, windows) and type(height) is int and type(width) is int and windows.dim() >= 2
                and height % layer.window_size == 0 and width % layer.window_size == 0
                and windows.numel() % (height * width * windows.shape[-1]) == 0):
            return op(windows, height, width, layer.window_size, shift_of(layer), 1)
        return layer.cyclic_shift(window_reverse(windows, layer.window_size, height, width), reverse=True)

    def maybe_pad(layer: Any, x: Any, height: Any, width: Any) -> Any:
        if usable(layer, x) and type(height) is int and type(width) is int \
                and height % layer.window_size == 0 and width % layer.window_size == 0:
            return x, (0, 0, 0, 0, 0, 0)
        return layer.maybe_pad(x, height, width)

    return {PARTITION: partition, REVERSE: reverse, PAD: maybe_pad}


def _is_self_attr(node: ast.expr, self_name: str, attr: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)
            and node.value.id == self_name)


def _self_call(node: ast.expr, self_name: str, method: str) -> bool:
    return isinstance(node, ast.Call) and _is_self_attr(node.func, self_name, method)


def _named_call(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _helper(name: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])


class _Windows(ast.NodeTransformer):
    def __init__(self, self_name: str):
        self.self_name = self_name
        self.found: dict[str, int] = {PARTITION: 0, REVERSE: 0, PAD: 0}

    def visit_Call(self, node: ast.Call) -> ast.expr:
        node = self.generic_visit(node)
        me = ast.Name(id=self.self_name, ctx=ast.Load())
        # window_partition(self.cyclic_shift(x), self.window_size)
        if (_named_call(node, "window_partition") and len(node.args) == 2 and not node.keywords
                and _self_call(node.args[0], self.self_name, "cyclic_shift") and len(node.args[0].args) == 1
                and not node.args[0].keywords and _is_self_attr(node.args[1], self.self_name, "window_size")):
            self.found[PARTITION] += 1
            return _helper(PARTITION, [me, node.args[0].args[0], ast.Name(id="window_partition", ctx=ast.Load())])
        # self.cyclic_shift(window_reverse(a, self.window_size, h, w), reverse=True)
        if (_self_call(node, self.self_name, "cyclic_shift") and len(node.args) == 1 and len(node.keywords) == 1
                and node.keywords[0].arg == "reverse" and isinstance(node.keywords[0].value, ast.Constant)
                and node.keywords[0].value.value is True and _named_call(node.args[0], "window_reverse")):
            inner = node.args[0]
            if len(inner.args) == 4 and not inner.keywords and _is_self_attr(inner.args[1], self.self_name, "window_size"):
                self.found[REVERSE] += 1
                return _helper(REVERSE, [me, inner.args[0], inner.args[2], inner.args[3],
                                         ast.Name(id="window_reverse", ctx=ast.Load())])
        # self.maybe_pad(x, height, width)
        if _self_call(node, self.self_name, "maybe_pad") and len(node.args) == 3 and not node.keywords:
            self.found[PAD] += 1
            return _helper(PAD, [me, *node.args])
        return node


def rewritten_members(cls: type, helpers: dict[str, Callable[..., Any]]) -> dict[str, Callable] | None:
    """``cls.forward`` with its window partition, reverse and pad calling the helpers; None where
    the forward has no source, or not exactly one partition and one reverse of that form."""
    forward = cls.forward
    inner = inspect.unwrap(forward)
    parsed = parse_forward(inner) if isinstance(inner, types.FunctionType) else None
    if parsed is None:
        return None
    tree, fdef = parsed
    rewriter = _Windows(fdef.args.args[0].arg)
    rewriter.visit(fdef)
    if rewriter.found[PARTITION] != 1 or rewriter.found[REVERSE] != 1 or rewriter.found[PAD] > 1:
        return None
    new = rewrap(forward, compile_forward(inner, tree, helpers))
    return None if new is None else {"forward": new}


def _apply_shifted_windows(model, k, done, replaced, skipped, probed) -> None:
    def members(cls: type, helpers: Any) -> dict[str, Callable] | None:
        return rewritten_members(cls, helpers)

    before = len(replaced)
    layers = {name for name, m in model.named_modules() if is_shifted_window_layer(m)}
    apply_rewritten_members(_Only(model, layers), k, "shifted_windows", "shifted_windows", window_helpers, members,
                            probed, replaced)
    placed = {name for name, kind in replaced[before:]}
    for name in sorted(set(k.problem.modules) - placed):
        skipped.append((name, "shifted_windows: its forward has no window_partition(self.cyclic_shift(x), "
                              "self.window_size) and cyclic_shift(window_reverse(...), reverse=True) to rewrite"))


class _Only:
    """``model`` whose ``named_modules`` lists only ``names``."""

    def __init__(self, model: Any, names: set[str]):
        self.model, self.names = model, names

    def named_modules(self):
        return ((n, m) for n, m in self.model.named_modules() if n in self.names)
