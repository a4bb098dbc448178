"""Applier for ``attention_masked`` on attention written out in a forward (MPT's ``MptAttention``):
scores, a position bias and a mask added to them, a softmax in fp32, dropout, the product with v.

The forward's source is rewritten (``rewrite``) where, in one list of statements, it has

* ``s = torch.matmul(Q, K.transpose(-1, -2)) * C`` (or ``Q @ K.transpose(-2, -1)``, ``C * ...``),
* then, before the softmax, only statements that add to the scores (``s = s + e``, ``s = e + s``)
  or fill them (``s = s.masked_fill(m, torch.finfo(...).min)``), in ``if`` blocks or not,
* ``w = <...>softmax(s.float(), dim=-1).to(V.dtype)``, optionally ``w = <...>dropout(w, ...)``,
  and ``o = torch.matmul(w, V)`` right after,

``Q``, ``K``, ``V`` and ``s`` plain names no other statement in between assigns, ``C`` a name,
attribute chain or constant, and nothing after reads ``s``, nor ``w`` but to return it.  Each of
those in-between statements adds a tensor that does not depend on the scores, or replaces some of
them by the dtype's lowest value, so running them on zero scores gives the additive mask the op
takes: ``s + mask`` is what they make of ``s`` (the filled places differ by ``s`` against a value of
-3.4e38, which rounds it away in fp32; softmax gives them zero weight either way, and a row filled
everywhere is uniform either way).  The rewritten forward decides once per call (``ready``): in eval
mode, on a call the op's kernel was judged on (dtype, head dim, as many keys as queries), with a
number for ``C`` and the op not handed back to PyTorch under torch.compile, the scores start as
zeros, the statements in between run as written (their checks and slicing included), and ``o`` is
the op's output, ``w`` None (the attention weights are not computed: transformers' SDPA path returns
None for them too); otherwise every statement runs as written.  Training (dropout) always runs the
original code.
"""
from __future__ import annotations

import ast
import inspect
import types
from typing import Any, Callable

import torch

from .calls import _sdpa_ok, kernel_mask
from .ops import traced_as_original
from .patching import apply_rewritten_forwards, rewrap
from .rewrite import compile_forward, parse_forward, statement_lists
from .selection import KernelOp

READY, ZEROS, ATTEND = "_autokernel_scores_ready", "_autokernel_zero_scores", "_autokernel_scores_attention"
FLAG = "_autokernel_scores_fast"


# ------------------------------------------------------------------ the helpers the forward calls
def helpers(k: KernelOp) -> dict[str, Callable[..., Any]]:
    op, dtype, head_dims = k.op, k.dtype, k.dims("D")

    def ready(module, q, key, v, scale) -> bool:
        return (not getattr(module, "training", True) and isinstance(scale, (int, float))
                and not isinstance(scale, bool) and isinstance(q, torch.Tensor) and isinstance(key, torch.Tensor)
                and isinstance(v, torch.Tensor) and _sdpa_ok(q, key, v, dtype, head_dims, False)
                and not traced_as_original(op))

    def zero_scores(q):
        return torch.zeros((1, 1, 1, 1), dtype=q.dtype, device=q.device)

    def attend(q, key, v, mask, scale):
        m = kernel_mask(mask, q, key)
        if m is not None:
            return op(q, key, v, m, float(scale))
        scores = torch.matmul(q, key.transpose(-1, -2)) * scale + mask
        return torch.matmul(torch.softmax(scores.float(), dim=-1).to(v.dtype), v)

    return {READY: ready, ZEROS: zero_scores, ATTEND: attend}


# ------------------------------------------------------------------ recognising the statements
def _name(node: Any) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _pure(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


def _negative(node: ast.expr, value: int) -> bool:
    """Is ``node`` the constant ``-value`` (written ``-value``: a minus and the number)?"""
    return ((isinstance(node, ast.Constant) and node.value == -value)
            or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
                and isinstance(node.operand, ast.Constant) and node.operand.value == value))


def _callee(node: ast.expr) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    return node.func.attr if isinstance(node.func, ast.Attribute) else _name(node.func)


def _matmul(node: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """(a, b) of ``torch.matmul(a, b)`` or ``a @ b``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return node.left, node.right
    if (_callee(node) == "matmul" and isinstance(node.func, ast.Attribute) and _name(node.func.value) == "torch"
            and len(node.args) == 2 and not node.keywords):
        return node.args[0], node.args[1]
    return None


def _transposed(node: ast.expr) -> str | None:
    """``K`` of ``K.transpose(-1, -2)`` (or ``(-2, -1)``)."""
    if (_callee(node) == "transpose" and isinstance(node.func, ast.Attribute) and len(node.args) == 2
            and not node.keywords):
        a, b = node.args
        if _negative(a, 1) and _negative(b, 2) or _negative(a, 2) and _negative(b, 1):
            return _name(node.func.value)
    return None


def _scores(stmt: ast.stmt) -> tuple[str, str, str, ast.expr] | None:
    """(s, Q, K, C) of ``s = matmul(Q, K.transpose(-1, -2)) * C``."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _name(stmt.targets[0])):
        return None
    value = stmt.value
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult)):
        return None
    for product, scale in ((value.left, value.right), (value.right, value.left)):
        pair = _matmul(product)
        if pair is not None and _pure(scale):
            q, key = _name(pair[0]), _transposed(pair[1])
            if q and key:
                return stmt.targets[0].id, q, key, scale
    return None


def _lowest_value(node: ast.expr) -> bool:
    """``torch.finfo(...).min``."""
    return (isinstance(node, ast.Attribute) and node.attr == "min" and _callee(node.value) == "finfo")


def _uses(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _added_or_filled(stmt: ast.Assign, s: str) -> bool:
    """``s = s + e``, ``s = e + s`` or ``s = s.masked_fill(m, torch.finfo(...).min)``, ``e`` and
    ``m`` free of ``s``."""
    v = stmt.value
    if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
        return ((_name(v.left) == s and not _uses(v.right, s)) or (_name(v.right) == s and not _uses(v.left, s)))
    return (_callee(v) == "masked_fill" and isinstance(v.func, ast.Attribute) and _name(v.func.value) == s
            and len(v.args) == 2 and not v.keywords and not _uses(v.args[0], s) and _lowest_value(v.args[1]))


def _between_ok(stmts: list[ast.stmt], s: str, fixed: set[str]) -> bool:
    """Do the statements between the scores and the softmax touch ``s`` only by adding to it or
    filling it, and leave the names in ``fixed`` (Q, K, V) as they are?"""
    allowed: set[int] = set()
    for stmt in stmts:
        for node in ast.walk(stmt):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and _name(node.targets[0]) == s
                    and _added_or_filled(node, s)):
                allowed.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == s)
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Global,
                                 ast.Nonlocal)):
                return False
            if isinstance(node, ast.Name):
                if node.id == s and id(node) not in allowed:
                    return False
                if node.id in fixed and not isinstance(node.ctx, ast.Load):
                    return False
    return True


def _softmax_of(stmt: ast.stmt, s: str) -> tuple[str, str] | None:
    """(w, V) of ``w = <...>softmax(s.float(), dim=-1).to(V.dtype)``."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _name(stmt.targets[0])):
        return None
    to = stmt.value
    if not (_callee(to) == "to" and isinstance(to.func, ast.Attribute) and len(to.args) == 1 and not to.keywords
            and isinstance(to.args[0], ast.Attribute) and to.args[0].attr == "dtype" and _name(to.args[0].value)):
        return None
    soft = to.func.value
    if _callee(soft) != "softmax" or not soft.args:
        return None
    first = soft.args[0]
    if not (_callee(first) == "float" and isinstance(first.func, ast.Attribute) and _name(first.func.value) == s
            and not first.args and not first.keywords):
        return None
    dims = list(soft.args[1:]) + [kw.value for kw in soft.keywords if kw.arg == "dim"]
    if len(dims) != 1 or not _negative(dims[0], 1) or any(kw.arg not in ("dim",) for kw in soft.keywords):
        return None
    return stmt.targets[0].id, to.args[0].value.id


def _dropout_of(stmt: ast.stmt, w: str) -> bool:
    """``w = <...>dropout(w, ...)``."""
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _name(stmt.targets[0]) == w
            and _callee(stmt.value) == "dropout" and bool(stmt.value.args) and _name(stmt.value.args[0]) == w)


def _output_of(stmt: ast.stmt, w: str, v: str) -> str | None:
    """``o`` of ``o = torch.matmul(w, V)``."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _name(stmt.targets[0])):
        return None
    pair = _matmul(stmt.value)
    return stmt.targets[0].id if pair is not None and _name(pair[0]) == w and _name(pair[1]) == v else None


# ------------------------------------------------------------------ the rewrite
def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


def _load(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def _assign(name: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value)


def _read_after(fdef: ast.FunctionDef, chain: list[ast.stmt], s: str, w: str) -> bool:
    """Does ``fdef`` read the scores ``s`` outside the chain, or the weights ``w`` otherwise than
    by returning them (the fast path leaves the mask in ``s`` and None in ``w``)?"""
    inside = {id(n) for stmt in chain for n in ast.walk(stmt)}
    returned = {id(e) for n in ast.walk(fdef) if isinstance(n, ast.Return) and n.value is not None
                for e in (n.value.elts if isinstance(n.value, ast.Tuple) else [n.value])}
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside
               and (n.id == s or (n.id == w and id(n) not in returned)) for n in ast.walk(fdef))


def _rewrite_body(body: list[ast.stmt], fdef: ast.FunctionDef) -> int:
    """Rewrite the first written-out attention in ``body`` (in place); 1 if there was one."""
    self_name = fdef.args.args[0].arg
    for i, stmt in enumerate(body):
        found = _scores(stmt)
        if found is None:
            continue
        s, q, key, scale = found
        for j in range(i + 1, len(body)):
            soft = _softmax_of(body[j], s)
            if soft is None:
                continue
            w, v = soft
            end = j + 1 + int(j + 1 < len(body) and _dropout_of(body[j + 1], w))
            out = _output_of(body[end], w, v) if end < len(body) else None
            if (out is None or not _between_ok(body[i + 1:j], s, {q, key, v}) or not _pure(scale)
                    or (isinstance(scale, ast.Name) and scale.id in (s, w))
                    or _read_after(fdef, body[i:end + 1], s, w)):
                break
            fast_stmt = ast.If(test=_load(FLAG), body=[_assign(out, _call(ATTEND, _load(q), _load(key), _load(v),
                                                                             _load(s), scale)),
                                                        _assign(w, ast.Constant(value=None))],
                               orelse=body[j:end + 1])
            first = [_assign(FLAG, _call(READY, _load(self_name), _load(q), _load(key), _load(v), scale)),
                     ast.If(test=_load(FLAG), body=[_assign(s, _call(ZEROS, _load(q)))], orelse=[stmt])]
            body[j:end + 1] = [ast.copy_location(fast_stmt, body[j])]
            body[i:i + 1] = [ast.copy_location(n, stmt) for n in first]
            return 1
        break
    return 0


def rewritten_forward(forward: Any, names: dict[str, Callable[..., Any]]) -> Any | None:
    """``forward`` with its written-out attention going to the op; None where it has none (or no source)."""
    inner = inspect.unwrap(forward)
    parsed = parse_forward(inner) if isinstance(inner, types.FunctionType) else None
    if parsed is None:
        return None
    tree, fdef = parsed
    if any(_uses(fdef, name) for name in (FLAG, READY, ZEROS, ATTEND)):
        return None  # rewritten before
    found = sum(_rewrite_body(body, fdef) for body in list(statement_lists(fdef)))
    if not found:
        return None
    return rewrap(forward, compile_forward(inner, tree, names))


def _apply_scores_attention(model, k: KernelOp, done, replaced, skipped, probed) -> None:
    apply_rewritten_forwards(model, k, "attention_masked", "scores attention", helpers, rewritten_forward, probed,
                             replaced)
