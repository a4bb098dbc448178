"""Applier for residual adds written in a forward just before a norm call (``add_rmsnorm`` /
``add_layernorm`` found by ``recognize.pair_residual_adds``): the add and the norm become the
op, and the forward keeps using the sum.

The parent's ``forward`` source is rewritten (its AST), for norm children that the plan names
and that compute the plain norm (probed), in two patterns:

* ``self.norm(a + b)``                       -> ``self.norm(a, b)[0]``
* ``x = a + b`` followed, within a few statements, by one that calls ``self.norm(x)``
                                              -> ``_ak_normed_<i>, x = self.norm(a, b)``, and
  the call replaced by ``_ak_normed_<i> if x is _ak_sum_<i> else self.norm(x)``: the fused
  result where ``x`` still holds that sum when the norm is reached (the norm is pure, so it may
  run where the add ran); the norm as before where a branch between reassigned ``x`` (GPT-2's
  optional cross-attention).  Nothing between may change the sum in place (``x.add_()``,
  ``x += y``, ``x[i] = ...``, also through an alias such as ``residual = x``), and no function
  may be defined there.

The norm child gets a subclass whose ``forward(x, residual=None)`` returns ``(norm(x +
residual), x + residual)`` through the op (what it ran before, when called without a
residual).  An add that runs in one forward and is normalised in the next (the last add of a
decoder layer and the next layer's first norm) is not rewritten; the profiler does not claim
it either.  Decorators around the forward are kept: each ``functools.wraps`` wrapper is
rebuilt around the rewritten function.  A forward that cannot be rewritten (no source, a
closure, no pattern) is left as it is, and the norms it holds are listed in ``skipped``.
"""
from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types
from typing import Any, Callable

import torch
import torch.nn as nn

from .calls import _REBOUND_MODULES
from .norms import _is_rmsnorm, _rmsnorm_eps
from .patching import _probe, _probe_input, _reference, _swap_class, rewrap
from .selection import KernelOp

TEMP_PREFIX = "_ak_normed_"
SUM_PREFIX = "_ak_sum_"


# ------------------------------------------------------------------ which norms
def _plain_norm_params(m: nn.Module, kind: str, dtype: torch.dtype,
                       probed: dict) -> Callable[[nn.Module], tuple] | None:
    """The op's parameters of a norm child that computes the plain norm of ``kind``, or None."""
    if kind == "add_layernorm":
        if not isinstance(m, nn.LayerNorm) or len(m.normalized_shape) != 1 or m.weight is None or m.bias is None:
            return None
        if m.weight.dtype != dtype or not _forward_is(type(m), nn.LayerNorm.forward):
            return None
        return lambda self: (self.weight, self.bias, self.eps)
    if not _is_rmsnorm(m) or m.weight.dtype != dtype:
        return None
    eps = _rmsnorm_eps(m, dtype)
    if eps is None:
        return None
    base = _original_class(type(m))
    ref = _reference("rmsnorm")
    key = (base, "rmsnorm", "plain", eps)
    if key not in probed:
        probed[key] = _probe(m, base, _probe_input(m.weight.shape[0], m, dtype), lambda x: ref(x, m.weight, eps))
    if not probed[key]:
        return None
    return lambda self, eps=eps: (self.weight, eps)


def _original_class(cls: type) -> type:
    """The model's own class under autokernel's generated subclasses."""
    while cls.__name__.startswith("Autokernel") and cls.__bases__:
        cls = cls.__bases__[0]
    return cls


def _takes_residual(forward: Callable) -> bool:
    """Does a norm's forward take a second tensor (``forward(x, residual)``)?"""
    try:
        params = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 3


def _forward_is(cls: type, forward: Callable) -> bool:
    return _original_class(cls).forward is forward


# ------------------------------------------------------------------ the AST rewrite
def _is_norm_call(node: ast.AST, self_name: str, norms: set[str]) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == self_name and node.func.attr in norms and len(node.args) == 1
            and not node.keywords and not isinstance(node.args[0], ast.Starred)):
        return node.func.attr
    return None


def _is_add(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)


class _NormOfSum(ast.NodeTransformer):
    """``self.norm(a + b)`` -> ``self.norm(a, b)[0]``."""

    def __init__(self, self_name: str, norms: set[str]):
        self.self_name, self.norms, self.fused = self_name, norms, []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = _is_norm_call(node, self.self_name, self.norms)
        if name is not None and _is_add(node.args[0]):
            add = node.args[0]
            self.fused.append(name)
            call = ast.Call(func=node.func, args=[add.left, add.right], keywords=[])
            return ast.Subscript(value=call, slice=ast.Constant(0), ctx=ast.Load())
        return node


def _calls_of(stmt: ast.stmt, self_name: str, norms: set[str], var: str) -> list[ast.Call]:
    return [n for n in ast.walk(stmt) if _is_norm_call(n, self_name, norms)
            and isinstance(n.args[0], ast.Name) and n.args[0].id == var]


def _unsafe(stmt: ast.stmt, names: set[str]) -> bool:
    """Could ``stmt`` change the tensor that ``names`` (the sum and its aliases) hold, in place?
    An in-place method call (``x.add_(...)``), an augmented assignment (``x += y`` adds in
    place), an item or attribute store on one of them; or a function defined there."""
    for n in ast.walk(stmt):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return True
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_")
                and not n.func.attr.startswith("_") and isinstance(n.func.value, ast.Name) and n.func.value.id in names):
            return True
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id in names:
            return True
        if (isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name) and n.value.id in names):
            return True
    return False


def _aliases(stmt: ast.stmt, names: set[str]) -> set[str]:
    """Names bound to one of ``names`` by ``stmt`` (``residual = x``)."""
    if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id in names
            and all(isinstance(t, ast.Name) for t in stmt.targets)):
        return {t.id for t in stmt.targets}
    return set()


LOOKAHEAD = 8  # statements after the add searched for the norm call


def _fuse_sum_then_norm(body: list[ast.stmt], self_name: str, norms: set[str], fused: list[str]) -> None:
    """``x = a + b`` ... ``self.norm(x)`` in one statement list (see the module docstring)."""
    i = 0
    while i < len(body):
        stmt = body[i]
        i += 1
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and _is_add(stmt.value)):
            continue
        var = stmt.targets[0].id
        names = {var}
        for later in body[i:i + LOOKAHEAD]:
            if _unsafe(later, names):
                break
            calls = _calls_of(later, self_name, norms, var)
            if len(calls) == 1 and not any(_is_norm_call(n, self_name, norms) for n in ast.walk(later)
                                           if n is not calls[0]):
                call = calls[0]
                temp, same = f"{TEMP_PREFIX}{len(fused)}", f"{SUM_PREFIX}{len(fused)}"
                fused.append(call.func.attr)
                pair = ast.Tuple(elts=[ast.Name(temp, ast.Store()), ast.Name(var, ast.Store())], ctx=ast.Store())
                fused_call = ast.Assign(targets=[pair],
                                        value=ast.Call(func=call.func, args=[stmt.value.left, stmt.value.right],
                                                       keywords=[]))
                keep = ast.Assign(targets=[ast.Name(same, ast.Store())], value=ast.Name(var, ast.Load()))
                body[i - 1:i] = [fused_call, keep]
                i += 1
                # the fused result where the sum reached the norm unchanged; the norm as before otherwise
                _replace(later, call, ast.IfExp(test=ast.Compare(left=ast.Name(var, ast.Load()), ops=[ast.Is()],
                                                                 comparators=[ast.Name(same, ast.Load())]),
                                                body=ast.Name(temp, ast.Load()), orelse=call))
                break
            if any(_is_norm_call(n, self_name, norms) for n in ast.walk(later)):
                break
            names |= _aliases(later, names)


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = new


def _statement_lists(node: ast.AST):
    for child in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(child, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def rewrite_forward(fn: types.FunctionType, norms: set[str]) -> tuple[types.FunctionType, list[str]] | None:
    """``fn`` (the undecorated forward) with its residual adds fused into the norm calls, and
    the norms fused; None when nothing matched or the source cannot be rewritten."""
    if fn.__code__.co_freevars:
        return None
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != fn.__name__ or not fdef.args.args:
        return None
    fdef.decorator_list = []
    self_name = fdef.args.args[0].arg
    fused: list[str] = []
    for body in list(_statement_lists(fdef)):
        _fuse_sum_then_norm(body, self_name, norms, fused)
    outer = _NormOfSum(self_name, norms)
    outer.visit(fdef)
    fused += outer.fused
    if not fused:
        return None
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    ast.fix_missing_locations(tree)
    code = compile(tree, inspect.getsourcefile(fn) or "<autokernel>", "exec")
    module_name = f"autokernel_rebound_{len(_REBOUND_MODULES)}_{fn.__globals__.get('__name__', 'm')}"
    module = types.ModuleType(module_name)  # a registered module: torch.compile finds globals by __name__
    module.__dict__.update(fn.__globals__)
    module.__dict__["__name__"] = module_name
    sys.modules[module_name] = module
    _REBOUND_MODULES.append(module)
    exec(code, module.__dict__)
    new = module.__dict__[fdef.name]
    module.__dict__[fdef.name] = fn.__globals__.get(fdef.name, new)
    new.__defaults__, new.__kwdefaults__, new.__qualname__ = fn.__defaults__, fn.__kwdefaults__, fn.__qualname__
    return new, fused


# ------------------------------------------------------------------ the applier
def _add_norm_members(k: KernelOp, n: int, params: Callable[[nn.Module], tuple], base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x, residual=None):
        if residual is None:
            return base_forward(self, x)
        if (x.dtype == dtype and residual.dtype == dtype and x.shape == residual.shape and x.shape[-1] == n
                and x.numel() > 0):
            out, s = op(x.reshape(-1, n), residual.reshape(-1, n), *params(self))
            return out.reshape(x.shape), s.reshape(x.shape)
        s = x + residual
        return base_forward(self, s), s

    return {"forward": forward}


def _apply_residual_adds(model, k, done, replaced, skipped, probed) -> None:
    for name, parent in model.named_modules():
        if id(parent) in done:
            continue
        prefix = f"{name}." if name else ""
        norms: dict[str, tuple[nn.Module, Callable]] = {}
        for child_name, child in parent.named_children():
            if prefix + child_name not in k.problem.modules or _takes_residual(_original_class(type(child)).forward):
                continue  # a norm(x, residual) module takes its add itself (``fused._apply_add_norm``)
            params = _plain_norm_params(child, k.kind, k.dtype, probed)
            if params is not None:
                norms[child_name] = (child, params)
        if not norms:
            continue
        cls = type(parent)
        if getattr(cls, "_autokernel_residual_adds", False):  # rewritten for another kind already
            skipped.extend((prefix + c, f"{k.kind}: {cls.__name__}.forward was rewritten for another add + norm op")
                           for c in norms)
            continue
        forward = cls.forward
        inner = inspect.unwrap(forward)
        rewritten = rewrite_forward(inner, set(norms)) if isinstance(inner, types.FunctionType) else None
        new_forward = rewrap(forward, rewritten[0]) if rewritten else None
        if new_forward is None:
            for child_name in norms:
                skipped.append((prefix + child_name, f"{k.kind}: the add before it in {cls.__name__}.forward "
                                "could not be rewritten"))
            continue
        for child_name in sorted(set(rewritten[1])):
            child, params = norms[child_name]
            n = child.weight.shape[0]
            eps = params(child)[-1]
            _swap_class(child, (k.kind, k.opname, "residual-add", n, eps), _add_norm_members(k, n, params, type(child)))
            replaced.append((prefix + child_name, k.kind))
        _swap_class(parent, (k.kind, k.opname, "residual-adds", tuple(sorted(norms))),
                    {"forward": new_forward, "_autokernel_residual_adds": True})
        done.add(id(parent))
