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
residual).

An add that ends one forward and is normalised by the next module call, in another forward
(the last add of a decoder layer, then the next layer's first norm or the final norm; the plan's
``add_from`` maps that norm to the module holding the add), is fused *ahead*: that module's
forward ends ``return a + b`` or ``x = a + b; return x`` (or such an ``x`` assigned in both
branches of the ``if`` before the return, or as the one such element of a returned tuple), and the add becomes
``add_ahead(self, a, b)``, which runs the norm's op at once and leaves the normalised rows with
the norm.  The norm gets a subclass that returns them only when it is called on that very sum,
unchanged since (the same tensor object, the same version counter, the same weight versions),
and normalises what it gets otherwise (a hook that replaced or changed the layer's output).
Under ``torch.compile`` both sides do what they did before (inductor fuses the add into the norm
itself).

Decorators around the forward are kept: each ``functools.wraps`` wrapper is rebuilt around the
rewritten function.  A forward that cannot be rewritten (no source, a closure, no pattern) is
left as it is, and the norms it holds are listed in ``skipped``.
"""
from __future__ import annotations

import ast
import inspect
import types
from typing import Any, Callable

import torch
import torch.nn as nn

from .norms import _original_class, layernorm_form, norm_width, rmsnorm_form
from .ops import rows
from .patching import _model_device, _swap_class, dtype_reason, rewrap
from .rewrite import compile_forward, parse_forward, statement_lists
from .selection import KernelOp

TEMP_PREFIX = "_ak_normed_"
SUM_PREFIX = "_ak_sum_"
AHEAD_HELPER = "_autokernel_add_ahead"  # the name a rewritten forward calls ``add_ahead`` by
NEXT_NORM = "_autokernel_next_norm"  # on a module whose returned add is fused ahead: that norm
PENDING = "_autokernel_pending"  # on that norm: (sum, its version, normalised rows, weight versions)


# ------------------------------------------------------------------ which norms
def _plain_norm_params(m: nn.Module, kind: str, dtype: torch.dtype, probed: dict,
                       device: torch.device) -> Callable[[nn.Module], tuple] | None:
    """The op's parameters of a norm child that computes the plain norm of ``kind``, or None."""
    if kind == "add_layernorm":
        form = layernorm_form(m, dtype, probed)
        if form is None:
            return None
        form.prepare(m, dtype, device)
        return form.params
    form = rmsnorm_form(m, dtype, probed)
    return form.params if form is not None else None


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


def _final_adds(fdef: ast.FunctionDef) -> list[ast.BinOp]:
    """The adds whose sum the forward returns, when they are its last computation: ``return a +
    b``, or ``x = a + b`` directly followed by ``return x``, or such an ``x`` assigned last in
    both branches of the ``if`` before the return (GPT-NeoX's parallel and sequential residuals);
    also as the one such element of a returned tuple (T5's ``return attention_output,
    position_bias, attn_weights``).  Empty when there is no such add."""
    body = fdef.body
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return []
    value = body[-1].value
    before = body[-2] if len(body) >= 2 else None
    elements = value.elts if isinstance(value, ast.Tuple) else [value]
    found = [adds for adds in (_adds_returned(e, before) for e in elements) if adds]
    return found[0] if len(found) == 1 else []


def _adds_returned(value: ast.expr, before: ast.stmt | None) -> list[ast.BinOp]:
    if _is_add(value):
        return [value]
    if not isinstance(value, ast.Name) or before is None:
        return []
    return _last_assigned_adds(before, value.id)


def _last_assigned_adds(stmt: ast.stmt, name: str) -> list[ast.BinOp]:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == name and _is_add(stmt.value)):
        return [stmt.value]
    if isinstance(stmt, ast.If) and stmt.body and stmt.orelse:
        then, other = _last_assigned_adds(stmt.body[-1], name), _last_assigned_adds(stmt.orelse[-1], name)
        return then + other if then and other else []
    return []


def rewrite_forward(fn: types.FunctionType, norms: set[str],
                    ahead: bool = False) -> tuple[types.FunctionType, list[str], bool] | None:
    """``fn`` (the undecorated forward) with its residual adds fused into the norm calls, the
    norms fused, and whether the add it returns now goes through ``add_ahead`` (asked by
    ``ahead``); None when nothing matched or the source cannot be rewritten."""
    parsed = parse_forward(fn)
    if parsed is None:
        return None
    tree, fdef = parsed
    self_name = fdef.args.args[0].arg
    fused: list[str] = []
    for body in list(statement_lists(fdef)):
        _fuse_sum_then_norm(body, self_name, norms, fused)
    outer = _NormOfSum(self_name, norms)
    outer.visit(fdef)
    fused += outer.fused
    finals = _final_adds(fdef) if ahead else []
    for final in finals:
        _replace(fdef, final, ast.Call(func=ast.Name(AHEAD_HELPER, ast.Load()),
                                       args=[ast.Name(self_name, ast.Load()), final.left, final.right], keywords=[]))
    if not fused and not finals:
        return None
    new = compile_forward(fn, tree, {AHEAD_HELPER: add_ahead})
    return new, fused, bool(finals)


# ------------------------------------------------------------------ the add fused ahead
def _versions(norm: nn.Module) -> tuple[int, ...]:
    """The version counters of the norm's own weights (not of what the op gets from them: Gemma's
    ``1 + w`` is a fresh tensor every call, and would always read as unchanged)."""
    return tuple(-1 if t.is_inference() else t._version for t in norm._parameters.values() if t is not None)


def _tracked_call(op: Callable, *args: Any) -> Any:
    """``op(*args)`` outside inference mode (without grad), so that the sum it returns has a
    version counter: an inference tensor has none, and could change in place unseen.  (The C
    guard: ``torch.inference_mode(False)`` costs several microseconds per layer on the host.)"""
    if not torch.is_inference_mode_enabled():
        return op(*args)
    with torch._C._InferenceMode(False), torch.no_grad():
        return op(*args)


def add_ahead(module: nn.Module, a: Any, b: Any) -> Any:
    """``a + b``, the add that ends ``module``'s forward.  Where the plan says the next module
    call normalises that sum (``module`` holds the norm under ``NEXT_NORM``), the add runs as the
    norm's fused op now, and the normalised rows are left with the norm, which returns them
    when it is called on this very sum, unchanged (``_ahead_norm_members``).  Under
    ``torch.compile`` the plain add: inductor fuses it into the norm itself."""
    norm = None if torch.compiler.is_compiling() else module.__dict__.get(NEXT_NORM)
    fused = getattr(type(norm), "_autokernel_ahead", None) if norm is not None else None
    if (fused is not None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
            and a.dtype == fused[3] and b.dtype == fused[3] and a.device == b.device and a.dim() >= 1
            and a.shape[-1] == fused[2] and a.numel() > 0):
        op, params, n, _ = fused
        weights = params(norm)
        out, s = _tracked_call(op, a.reshape(-1, n), b.reshape(-1, n), *weights)
        s, out = s.view(a.shape), out.view(a.shape)
        norm.__dict__[PENDING] = (s, s._version, out, _versions(norm))
        return s
    return a + b


def _ahead_norm_members(k: KernelOp, n: int, params: Callable[[nn.Module], tuple], base: type) -> dict[str, Any]:
    base_forward = base.forward

    def forward(self, x, *args, **kwargs):
        pending = None if torch.compiler.is_compiling() else self.__dict__.pop(PENDING, None)
        if (pending is not None and not args and not kwargs and x is pending[0] and x._version == pending[1]
                and _versions(self) == pending[3]):
            return pending[2]
        return base_forward(self, x, *args, **kwargs)

    return {"forward": forward, "_autokernel_ahead": (k.op, params, n, k.dtype)}


def _ahead_target(model: nn.Module, norm_name: str, k: KernelOp, probed: dict,
                  skipped: list) -> tuple[nn.Module, Callable[[nn.Module], tuple]] | None:
    """The norm (and its op parameters) that the add ending another forward is fused into."""
    try:
        norm = model.get_submodule(norm_name)
    except AttributeError:
        skipped.append((norm_name, f"{k.kind}: no such module in the model"))
        return None
    params = None if _takes_residual(_original_class(type(norm)).forward) else \
        _plain_norm_params(norm, k.kind, k.dtype, probed, _model_device(model))
    if params is None:
        weight = getattr(norm, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dtype != k.dtype:  # the run's dtype, not the norm's form
            skipped.append((norm_name, dtype_reason(k.kind, weight.dtype, k.dtype)))
        else:
            skipped.append((norm_name, f"{k.kind}: {type(norm).__name__} is not a plain norm of the kind"))
        return None
    return norm, params


# ------------------------------------------------------------------ the applier
def _add_norm_members(k: KernelOp, n: int, params: Callable[[nn.Module], tuple], base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x, residual=None):
        if residual is None:
            return base_forward(self, x)
        if (x.dtype == dtype and residual.dtype == dtype and x.shape == residual.shape and x.shape[-1] == n
                and x.numel() > 0):
            out, s = op(rows(op, x, n), rows(op, residual, n), *params(self))
            return out.reshape(x.shape), s.reshape(x.shape)
        s = x + residual
        return base_forward(self, s), s

    return {"forward": forward}


def _apply_residual_adds(model, k, done, replaced, skipped, probed) -> None:
    feeds = {producer: norm for norm, producer in k.problem.add_from.items()}
    for name, parent in model.named_modules():
        if id(parent) in done:
            continue
        prefix = f"{name}." if name else ""
        norms: dict[str, tuple[nn.Module, Callable]] = {}
        for child_name, child in parent.named_children():
            if (prefix + child_name not in k.problem.modules or prefix + child_name in k.problem.add_from
                    or _takes_residual(_original_class(type(child)).forward)):
                continue  # a norm(x, residual) module takes its add itself (``fused._apply_add_norm``)
            params = _plain_norm_params(child, k.kind, k.dtype, probed, _model_device(model))
            if params is not None:
                norms[child_name] = (child, params)
        target = _ahead_target(model, feeds[name], k, probed, skipped) if name in feeds else None
        if not norms and target is None:
            continue
        cls = type(parent)
        lost = [prefix + c for c in norms] + ([feeds[name]] if target else [])
        if getattr(cls, "_autokernel_residual_adds", False):  # rewritten for another kind already
            skipped.extend((m, f"{k.kind}: {cls.__name__}.forward was rewritten for another add + norm op") for m in lost)
            continue
        forward = cls.forward
        inner = inspect.unwrap(forward)
        rewritten = rewrite_forward(inner, set(norms), ahead=target is not None) \
            if isinstance(inner, types.FunctionType) else None
        new_forward = rewrap(forward, rewritten[0]) if rewritten else None
        if new_forward is None:
            skipped.extend((m, f"{k.kind}: the add feeding it in {cls.__name__}.forward could not be rewritten")
                           for m in lost)
            continue
        for child_name in sorted(set(rewritten[1])):
            child, params = norms[child_name]
            n = norm_width(child)
            eps = params(child)[-1]
            _swap_class(child, (k.kind, k.identity, "residual-add", n, eps), _add_norm_members(k, n, params, type(child)))
            replaced.append((prefix + child_name, k.kind))
        if target is not None and rewritten[2]:
            norm, params = target
            n = norm_width(norm)
            _swap_class(norm, (k.kind, k.identity, "ahead", n, params(norm)[-1]),
                        _ahead_norm_members(k, n, params, type(norm)))
            parent.__dict__[NEXT_NORM] = norm
            replaced.append((feeds[name], k.kind))
        elif target is not None:
            skipped.append((feeds[name], f"{k.kind}: {cls.__name__}.forward does not end by returning an add"))
        _swap_class(parent, (k.kind, k.identity, "residual-adds", tuple(sorted(norms)), bool(rewritten[2])),
                    {"forward": new_forward, "_autokernel_residual_adds": True})
        done.add(id(parent))
