"""The heads' copies an attention module writes out before its attention call, and their removal.

Whisper's attention makes each of q, k and v ``proj(h).view(B, S, H, D).transpose(1, 2).contiguous()``:
a copy of each projection into [B, H, S, D] order, 2 BSD e bytes each, before the attention
function, which may take the head-strided view as it is (the attention problems' declared layout,
``problems.attention.head_strided_layout``: the ops take it without a copy).  Where such a
module's attention runs our op, ``apply`` drops those ``.contiguous()`` calls from its forward
(``drop_head_copies``), and the profiler counts their time with that attention problem
(``recognize_head_copies``).  ``.contiguous()`` changes no value, only the layout; a copy is
dropped only where the name it is assigned to is read afterwards as a call's argument and nothing
else (no ``.view`` of it in the forward), and not handed to a child module."""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types


def _head_copy(node: ast.AST) -> ast.expr | None:
    """The ``e.transpose(1, 2)`` of ``e.transpose(1, 2).contiguous()``; None for anything else."""
    if not (isinstance(node, ast.Call) and not node.args and not node.keywords
            and isinstance(node.func, ast.Attribute) and node.func.attr == "contiguous"):
        return None
    inner = node.func.value
    if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "transpose"
            and not inner.keywords and len(inner.args) == 2
            and all(isinstance(a, ast.Constant) and a.value in (1, 2) for a in inner.args)
            and {a.value for a in inner.args} == {1, 2}):
        return inner
    return None


def _only_passed_on(fdef: ast.FunctionDef, name: str, after: ast.stmt) -> bool:
    """Is ``name`` read after ``after`` only as a whole argument of calls, none of them a call of
    one of the module's children (``self.<child>(...)``, whose forward might view it)?"""
    self_name = fdef.args.args[0].arg if fdef.args.args else None
    argument_ids = set()
    for node in ast.walk(fdef):
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Attribute)
                                               and isinstance(node.func.value, ast.Name)
                                               and node.func.value.id == self_name):
            argument_ids |= {id(a) for a in node.args} | {id(k.value) for k in node.keywords}
    start = after.end_lineno or after.lineno
    return all(id(node) in argument_ids for node in ast.walk(fdef)
               if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
               and getattr(node, "lineno", start + 1) > start)


def _droppable(fdef: ast.FunctionDef) -> list[ast.Assign]:
    """``name = e.transpose(1, 2).contiguous()`` statements whose name is only passed on."""
    found = []
    for stmt in ast.walk(fdef):
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and _head_copy(stmt.value) is not None and _only_passed_on(fdef, stmt.targets[0].id, stmt)):
            found.append(stmt)
    return found


def drop_head_copies(fdef: ast.FunctionDef) -> int:
    """Drop the droppable heads' copies from ``fdef`` (changed in place); how many."""
    stmts = _droppable(fdef)
    for stmt in stmts:
        stmt.value = _head_copy(stmt.value)
    return len(stmts)


@functools.lru_cache(maxsize=256)
def writes_head_copies(cls: type) -> bool:
    """Does ``cls``'s own ``forward`` (undecorated, as its file has it) write a droppable heads' copy?"""
    fn = inspect.unwrap(getattr(cls, "forward", None) or (lambda: None))
    if not isinstance(fn, types.FunctionType):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    fdef = tree.body[0] if tree.body else None
    return isinstance(fdef, ast.FunctionDef) and bool(_droppable(fdef))
