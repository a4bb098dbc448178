"""Applier for ``softcap``: a soft cap written in a forward (Gemma-2's final logits) becomes
one call of the op.

The forward's source is rewritten (``rewrite``), in two spellings, ``C`` being the same name,
attribute chain or constant both times:

* three consecutive statements ``x = x / C``, ``x = torch.tanh(x)`` (or ``x.tanh()``),
  ``x = x * C`` (or ``C * x``)            -> ``x = _autokernel_softcap(x, C)``
* the expression ``C * torch.tanh(e / C)`` (or ``torch.tanh(e / C) * C``, or
  ``e.div(C).tanh().mul(C)``)             -> ``_autokernel_softcap(e, C)``

The helper runs the op on the calls its kernel was judged on (the dtype, a positive number for
``C``), and ``torch.tanh(x / C) * C`` otherwise, which is what the statements computed.  While
torch.compile traces with the op handed over (``compile_policy``), the helper also runs that
expression: inductor sees the model's own arithmetic.
"""
from __future__ import annotations

import ast
import inspect
import types
from typing import Any, Callable

import torch

from .ops import traced_as_original
from .patching import apply_rewritten_forwards, rewrap
from .rewrite import compile_forward, parse_forward, pure, statement_lists
from .selection import KernelOp

HELPER = "_autokernel_softcap"


def softcap_helper(k: KernelOp) -> Callable[[Any, Any], Any]:
    op, dtype = k.op, k.dtype

    def softcap(x, cap):
        if (isinstance(x, torch.Tensor) and x.dtype == dtype and x.dim() >= 1 and x.numel() > 0
                and isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0
                and not traced_as_original(op)):
            return op(x.reshape(-1, x.shape[-1]), float(cap)).reshape(x.shape)
        return torch.tanh(x / cap) * cap

    return softcap


def _same(a: ast.expr, b: ast.expr) -> bool:
    return pure(a) and ast.dump(a) == ast.dump(b)


def _tanh_of(node: ast.expr) -> ast.expr | None:
    """``e`` of ``torch.tanh(e)`` or ``e.tanh()``."""
    if not isinstance(node, ast.Call) or node.keywords or not isinstance(node.func, ast.Attribute):
        return None
    func = node.func
    if func.attr != "tanh":
        return None
    if isinstance(func.value, ast.Name) and func.value.id == "torch" and len(node.args) == 1:
        return node.args[0]
    return func.value if not node.args else None


def _helper_call(x: ast.expr, cap: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=HELPER, ctx=ast.Load()), args=[x, cap], keywords=[])


def _times(node: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """The two factors of ``a * b``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return node.left, node.right
    return None


def _method(node: ast.expr, name: str, args: int) -> tuple[ast.expr, list[ast.expr]] | None:
    """(receiver, arguments) of ``receiver.name(*arguments)`` with ``args`` positional arguments."""
    if (isinstance(node, ast.Call) and not node.keywords and len(node.args) == args
            and isinstance(node.func, ast.Attribute) and node.func.attr == name):
        return node.func.value, node.args
    return None


class _CapExpressions(ast.NodeTransformer):
    def __init__(self) -> None:
        self.found = 0

    def visit_Call(self, node: ast.Call) -> ast.AST:
        """``e.div(C).tanh().mul(C)``"""
        self.generic_visit(node)
        mul = _method(node, "mul", 1)
        tanh = _method(mul[0], "tanh", 0) if mul else None
        div = _method(tanh[0], "div", 1) if tanh else None
        if div is not None and _same(div[1][0], mul[1][0]):
            self.found += 1
            return ast.copy_location(_helper_call(div[0], div[1][0]), node)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        factors = _times(node)
        if factors is None:
            return node
        for tanh_side, cap in (factors, factors[::-1]):
            inner = _tanh_of(tanh_side)
            if (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Div) and _same(inner.right, cap)):
                self.found += 1
                return ast.copy_location(_helper_call(inner.left, cap), node)
        return node


def _one_name_assign(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _fuse_statements(body: list[ast.stmt]) -> int:
    """``x = x / C; x = torch.tanh(x); x = x * C`` -> ``x = helper(x, C)``."""
    found, i = 0, 0
    while i + 2 < len(body):
        first, second, third = body[i:i + 3]
        name = _one_name_assign(first)
        if name and _one_name_assign(second) == name and _one_name_assign(third) == name:
            div, tanh, mul = first.value, _tanh_of(second.value), _times(third.value)
            if (isinstance(div, ast.BinOp) and isinstance(div.op, ast.Div) and _is_name(div.left, name)
                    and tanh is not None and _is_name(tanh, name) and mul is not None):
                cap = div.right
                if ((_is_name(mul[0], name) and _same(cap, mul[1])) or (_is_name(mul[1], name) and _same(cap, mul[0]))):
                    first.value = _helper_call(ast.Name(id=name, ctx=ast.Load()), cap)
                    del body[i + 1:i + 3]
                    found += 1
        i += 1
    return found


def rewritten_forward(forward: Any, helper: Callable[[Any, Any], Any]) -> Any | None:
    """``forward`` with its soft caps calling ``helper``; None where it has none (or no source)."""
    inner = inspect.unwrap(forward)
    parsed = parse_forward(inner) if isinstance(inner, types.FunctionType) else None
    if parsed is None:
        return None
    tree, fdef = parsed
    found = sum(_fuse_statements(body) for body in list(statement_lists(fdef)))
    visitor = _CapExpressions()
    visitor.visit(fdef)
    if not found + visitor.found:
        return None
    return rewrap(forward, compile_forward(inner, tree, {HELPER: helper}))


def _apply_softcap(model, k, done, replaced, skipped, probed) -> None:
    apply_rewritten_forwards(model, k, "softcap", "softcap", softcap_helper, rewritten_forward, probed, replaced)
