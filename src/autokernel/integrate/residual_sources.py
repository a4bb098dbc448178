"""Where a forward's residual adds are, read from its source (its AST), and the rewrite that
fuses them with their norms (the patterns: ``residuals``' docstring).  ``rewrite_forward`` returns
the compiled forward and what it fused; switching the norms is the applier's (``residuals``)."""
from __future__ import annotations

import ast
import types
from dataclasses import dataclass
from typing import Any

from .residual_ahead import add_ahead, add_into
from .rewrite import compile_forward, parse_forward, statement_lists

TEMP_PREFIX = "_ak_normed_"
SUM_PREFIX = "_ak_sum_"
AHEAD_HELPER = "_autokernel_add_ahead"  # the name a rewritten forward calls ``add_ahead`` by
INTO_HELPER = "_autokernel_add_into"  # ... and ``add_into``
AHEAD_FUNCTION = "_autokernel_ahead_"  # + a function's name: its copy whose returned add is fused ahead
MODULE_ARG = "_autokernel_module"  # the keyword that copy takes the module whose forward calls it by
VIEWS = ("view", "reshape")


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


def _views_itself(stmt: ast.stmt, var: str) -> bool:
    """Is ``stmt`` ``var = var.reshape(...)`` or ``var = var.view(...)``?"""
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == var and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr in VIEWS
            and isinstance(stmt.value.func.value, ast.Name) and stmt.value.func.value.id == var)


def _rebinds(stmt: ast.stmt, var: str) -> bool:
    """Does ``stmt`` itself (not a branch inside it) bind ``var`` anew (RoBERTa's embeddings:
    ``x = a + b``, then ``x = x + p`` before the norm)?"""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    return any(isinstance(n, ast.Name) and n.id == var for t in targets for n in ast.walk(t))


LOOKAHEAD = 8  # statements after the add searched for the norm call


def _assigns_sum(stmt: ast.stmt) -> bool:
    """Is ``stmt`` ``x = a + b``?"""
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and _is_add(stmt.value))


def _branch_ending_in_sum(stmt: ast.stmt) -> list[ast.stmt] | None:
    """The body of ``stmt`` when it is an ``if`` whose body ends ``x = a + b`` (BART's and
    Whisper's decoder layers end their cross-attention block so, the norm after the block)."""
    if isinstance(stmt, ast.If) and stmt.body and _assigns_sum(stmt.body[-1]):
        return stmt.body
    return None


def _fuse_sum_then_norm(body: list[ast.stmt], self_name: str, norms: set[str], fused: list[str],
                        deferred: list[str]) -> None:
    """``x = a + b`` ... ``self.norm(x)`` in one statement list (``residuals``' docstring); with
    ``x = x.reshape(...)`` between, the add becomes ``add_into(self.norm, a, b)`` (``deferred``)."""
    i = 0
    while i < len(body):
        stmt = body[i]
        i += 1
        branch = _branch_ending_in_sum(stmt)
        if branch is not None:  # the sum assigned last in an ``if``'s body, normalised after it
            stmt = branch[-1]
        elif not _assigns_sum(stmt):
            continue
        var = stmt.targets[0].id
        names = {var}
        viewed = False
        for later in body[i:i + LOOKAHEAD]:
            if _unsafe(later, names):
                break
            calls = _calls_of(later, self_name, norms, var)
            if len(calls) == 1 and not any(_is_norm_call(n, self_name, norms) for n in ast.walk(later)
                                           if n is not calls[0]):
                call = calls[0]
                if call.func.attr in (fused if viewed else deferred):
                    break  # a norm takes its sums one way: its class is switched for one
                if viewed and branch is not None:
                    break
                if viewed:
                    deferred.append(call.func.attr)
                    stmt.value = ast.Call(func=ast.Name(INTO_HELPER, ast.Load()),
                                          args=[ast.Attribute(ast.Name(self_name, ast.Load()), call.func.attr,
                                                              ast.Load()),
                                                stmt.value.left, stmt.value.right], keywords=[])
                    break
                temp, same = f"{TEMP_PREFIX}{len(fused)}", f"{SUM_PREFIX}{len(fused)}"
                fused.append(call.func.attr)
                pair = ast.Tuple(elts=[ast.Name(temp, ast.Store()), ast.Name(var, ast.Store())], ctx=ast.Store())
                fused_call = ast.Assign(targets=[pair],
                                        value=ast.Call(func=call.func, args=[stmt.value.left, stmt.value.right],
                                                       keywords=[]))
                keep = ast.Assign(targets=[ast.Name(same, ast.Store())], value=ast.Name(var, ast.Load()))
                if branch is not None:  # the sum where the branch ran; None (never the tensor reached) where not
                    branch[-1:] = [fused_call, keep]
                    body[i - 1:i - 1] = [ast.Assign(targets=[ast.Name(same, ast.Store())], value=ast.Constant(None))]
                else:
                    body[i - 1:i] = [fused_call, keep]
                i += 1
                # the fused result where the sum reached the norm unchanged; the norm as before otherwise
                _replace(later, call, ast.IfExp(test=ast.Compare(left=ast.Name(var, ast.Load()), ops=[ast.Is()],
                                                                 comparators=[ast.Name(same, ast.Load())]),
                                                body=ast.Name(temp, ast.Load()), orelse=call))
                break
            if any(_is_norm_call(n, self_name, norms) for n in ast.walk(later)):
                break
            if _rebinds(later, var) and not _views_itself(later, var):
                break  # the sum never reaches the norm: fused, the op would run for nothing
            names |= _aliases(later, names)
            viewed = viewed or _views_itself(later, var)


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = new


def _final_adds(fdef: ast.FunctionDef, calls: bool = True) -> list[ast.expr]:
    """The adds whose sum the forward returns, when they are its last computation: ``return a +
    b``, or ``x = a + b`` directly followed by ``return x``, or such an ``x`` assigned last in
    both branches of the ``if`` before the return (GPT-NeoX's parallel and sequential residuals);
    also as the one such element of a returned tuple (T5's ``return attention_output,
    position_bias, attn_weights``).  The sum may be viewed (OPT's ``x = (a + b).view(shape)``),
    and ``if`` statements without an ``else`` that add nothing may come before the return (OPT's
    post-norm branch: where it runs, the norm gets another tensor and normalises it itself).
    With ``calls``, an add may also be a call of a function by its name (Falcon's
    ``x = dropout_add(h, residual, p, training)``): the ``ast.Call`` then stands for the add
    its function returns.  Empty when there is no such add."""
    body = fdef.body
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return []
    value = body[-1].value
    rest = body[:-1]
    while rest and isinstance(rest[-1], ast.If) and not rest[-1].orelse and not _adds_anything(rest[-1]):
        rest = rest[:-1]
    before = rest[-1] if rest else None
    elements = value.elts if isinstance(value, ast.Tuple) else [value]
    found = [adds for adds in (_adds_returned(e, before, calls) for e in elements) if adds]
    return found[0] if len(found) == 1 else []


def _adds_anything(stmt: ast.stmt) -> bool:
    return any(isinstance(n, (ast.AugAssign, ast.BinOp)) and isinstance(n.op, ast.Add) for n in ast.walk(stmt))


def _the_add(value: ast.expr, calls: bool) -> ast.expr | None:
    """The add (or, with ``calls``, the call of a function by name) that ``value`` is, viewed or not."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in VIEWS:
        value = value.func.value
    if _is_add(value) or calls and isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value
    return None


def _adds_returned(value: ast.expr, before: ast.stmt | None, calls: bool) -> list[ast.expr]:
    add = _the_add(value, calls)
    if add is not None:
        return [add]
    if not isinstance(value, ast.Name) or before is None:
        return []
    return _last_assigned_adds(before, value.id, calls)


def _last_assigned_adds(stmt: ast.stmt, name: str, calls: bool) -> list[ast.expr]:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == name):
        add = _the_add(stmt.value, calls)
        return [add] if add is not None else []
    if isinstance(stmt, ast.If) and stmt.body and stmt.orelse:
        then, other = _last_assigned_adds(stmt.body[-1], name, calls), _last_assigned_adds(stmt.orelse[-1], name, calls)
        return then + other if then and other else []
    return []


def _ahead_function(fn: Any) -> types.FunctionType | None:
    """A copy of the plain function ``fn`` (Falcon's ``dropout_add``) that returns one add (not
    in a tuple), the add through ``add_ahead`` for the module its keyword ``MODULE_ARG`` names;
    None for any other function, or one whose source cannot be rewritten."""
    if not isinstance(fn, types.FunctionType) or hasattr(fn, "__wrapped__"):
        return None
    parsed = parse_forward(fn)
    if parsed is None:
        return None
    tree, fdef = parsed
    finals = _final_adds(fdef, calls=False)
    if not finals or isinstance(fdef.body[-1].value, ast.Tuple):
        return None
    for final in finals:
        _replace(fdef, final, ast.Call(func=ast.Name(AHEAD_HELPER, ast.Load()),
                                       args=[ast.Name(MODULE_ARG, ast.Load()), final.left, final.right], keywords=[]))
    fdef.args.kwonlyargs.append(ast.arg(MODULE_ARG))
    fdef.args.kw_defaults.append(None)
    return compile_forward(fn, tree, {AHEAD_HELPER: add_ahead})


def _route_ahead(fdef: ast.FunctionDef, fn: types.FunctionType, self_name: str, helpers: dict[str, Any]) -> bool:
    """Send the add ``fdef`` returns (``_final_adds``) through ``add_ahead``: the add itself, or
    the call of a function that returns one, made a call of its copy (``_ahead_function``) that
    is told the module.  False (``fdef`` unchanged) when there is none, or a called function
    does not end so."""
    finals = _final_adds(fdef)
    copies = {}
    for final in finals:
        if isinstance(final, ast.Call):
            copy = _ahead_function(fn.__globals__.get(final.func.id))
            if copy is None:
                return False
            copies[final.func.id] = copy
    for final in finals:
        if isinstance(final, ast.Call):
            final.func = ast.Name(AHEAD_FUNCTION + final.func.id, ast.Load())
            final.keywords.append(ast.keyword(MODULE_ARG, ast.Name(self_name, ast.Load())))
        else:
            _replace(fdef, final, ast.Call(func=ast.Name(AHEAD_HELPER, ast.Load()),
                                           args=[ast.Name(self_name, ast.Load()), final.left, final.right],
                                           keywords=[]))
    helpers.update({AHEAD_FUNCTION + name: copy for name, copy in copies.items()})
    return bool(finals)


@dataclass
class Rewritten:
    """A forward with its residual adds fused: the norms now called as ``norm(a, b)`` where the
    add was (``fused``), those whose add runs their op ahead in this forward (``deferred``), and
    whether the add it returns goes through ``add_ahead`` (``ahead``)."""

    forward: types.FunctionType
    fused: list[str]
    deferred: list[str]
    ahead: bool


def rewrite_forward(fn: types.FunctionType, norms: set[str], ahead: bool = False) -> Rewritten | None:
    """``fn`` (the undecorated forward) with its residual adds fused into the norm calls, and the
    add it returns sent ahead when ``ahead`` asks; None when nothing matched or the source cannot
    be rewritten."""
    parsed = parse_forward(fn)
    if parsed is None:
        return None
    tree, fdef = parsed
    self_name = fdef.args.args[0].arg
    fused: list[str] = []
    deferred: list[str] = []
    for body in list(statement_lists(fdef)):
        _fuse_sum_then_norm(body, self_name, norms, fused, deferred)
    outer = _NormOfSum(self_name, norms - set(deferred))
    outer.visit(fdef)
    fused += outer.fused
    helpers: dict[str, Any] = {AHEAD_HELPER: add_ahead, INTO_HELPER: add_into}
    routed = ahead and _route_ahead(fdef, fn, self_name, helpers)
    if not fused and not deferred and not routed:
        return None
    return Rewritten(compile_forward(fn, tree, helpers), fused, deferred, routed)
