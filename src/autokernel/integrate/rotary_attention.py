"""``attention_rotary``: a forward that rotates q and k (``q, k = apply_rotary*(q, k, cos, sin)``)
and then hands them to attention (``F.scaled_dot_product_attention``, or transformers'
``ALL_ATTENTION_FUNCTIONS`` interface) runs both as one op.

How, without rewriting the forward: in a variant of the method, the rotary function returns
the *unrotated* q and k wrapped as a :class:`Pending` pair (with cos and sin), and the
attention call that receives that pair runs the fused op.  Anything else that received a
pending tensor would compute with unrotated values, so the variant is used only where the
method's source shows (``pair_site``) that the two names the rotary call assigns are read
nowhere but as q and k of that one attention call, except inside ``if <parameter> is not
None:`` blocks (transformers' ``cache.update``), and then only on calls where those parameters
are None; other calls run the method as before (the separate rotary / attention paths).
Where the attention call cannot take the pair (a mask, dropout, another dtype, a position
bias, transformers' eager interface), the pair is rotated first by the rotary path it would
have had (the ``rotary`` op when one is applied, else the model's own function), so the
result is what the method computed before.

The probe: the rotary function, called on small random q, k and a [1, S, D] table, must give
the ``rotate_half`` rotation of the problem's reference; otherwise the module keeps its paths.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .calls import (_functional_proxy, _rebound, _rotary_form, _rotary_replacement, hf_causal,
                    hf_plain_attention, sdpa_ignores)
from .patching import PROBE_TOLERANCE, _code_names, _rel_error
from .selection import KernelOp

INTERFACES = "ALL_ATTENTION_FUNCTIONS"


# ------------------------------------------------------------------ where the pair is (source)
@dataclass(frozen=True)
class PairSite:
    rotary: str  # the global name of the rotary function the method calls
    guards: tuple[tuple[str, int, Any], ...]  # (parameter, position, default): must be None to fuse


def pair_site(fn: types.FunctionType) -> PairSite | None:
    """Where ``fn`` rotates q and k and hands them to attention, if its source shows that the
    rotated q and k go nowhere else (module docstring); None otherwise."""
    if not any(_rotary_form(fn.__globals__.get(n)) is True for n in _code_names(fn.__code__)):
        return None  # calls no rotary function of the pair form: nothing to read
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef):
        return None
    g = fn.__globals__
    rotary_stmts = [i for i, s in enumerate(fdef.body) if _rotary_assignment(s, g) is not None]
    if len(rotary_stmts) != 1:
        return None
    at = rotary_stmts[0]
    name = _rotary_assignment(fdef.body[at], g)
    if sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
           for n in ast.walk(fdef)) != 1:
        return None
    q, k = (e.id for e in fdef.body[at].targets[0].elts)
    params = _parameters(fn)
    guards: list[tuple[str, int, Any]] = []
    attended = False
    for stmt in fdef.body[at + 1:]:
        uses = _uses(stmt, {q, k})
        if not uses:
            continue
        if attended:
            return None
        guard = _none_guard(stmt, params, fdef)
        if guard is not None:
            guards.append(guard)
        elif uses == 2 and _attention_call(stmt, q, k, g, fdef):
            attended = True
        else:
            return None
    return PairSite(name, tuple(guards)) if attended else None


def _rotary_assignment(stmt: ast.stmt, g: dict) -> str | None:
    """``a, b = f(...)`` with ``f`` a global rotary function of the pair form: f's name."""
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)
            and len(stmt.targets[0].elts) == 2 and all(isinstance(e, ast.Name) for e in stmt.targets[0].elts)
            and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name)
            and _rotary_form(g.get(stmt.value.func.id)) is True):
        return stmt.value.func.id
    return None


def _uses(node: ast.AST, names: set[str]) -> int:
    return sum(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _parameters(fn: types.FunctionType) -> dict[str, tuple[int, Any]]:
    """Parameter -> (position in a call's arguments, self included; default)."""
    out: dict[str, tuple[int, Any]] = {}
    sig = inspect.signature(fn)
    for i, p in enumerate(sig.parameters.values()):
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            out[p.name] = (i, None if p.default is p.empty else p.default)
        elif p.kind == p.KEYWORD_ONLY:
            out[p.name] = (-1, None if p.default is p.empty else p.default)
    return out


def _stored(fdef: ast.FunctionDef, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del))
               for n in ast.walk(fdef))


def _none_guard(stmt: ast.stmt, params: dict, fdef: ast.FunctionDef) -> tuple[str, int, Any] | None:
    """``if <parameter> is not None: ...`` (no else), the parameter never reassigned."""
    test = getattr(stmt, "test", None)
    if (isinstance(stmt, ast.If) and not stmt.orelse and isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name) and test.left.id in params and len(test.ops) == 1
            and isinstance(test.ops[0], ast.IsNot) and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None and not _stored(fdef, test.left.id)):
        position, default = params[test.left.id]
        return test.left.id, position, default
    return None


def _attention_call(stmt: ast.stmt, q: str, k: str, g: dict, fdef: ast.FunctionDef) -> bool:
    """Does ``stmt`` hold a call of SDPA (through ``torch.nn.functional`` as a global, or the
    function itself) with ``q, k`` as its first two arguments, or of a local set only from
    transformers' attention interfaces with ``(self, q, k, ...)``?"""
    for call in (n for n in ast.walk(stmt) if isinstance(n, ast.Call)):
        args = [a.id if isinstance(a, ast.Name) else None for a in call.args]
        func = call.func
        if args[:2] == [q, k] and (
                isinstance(func, ast.Attribute) and func.attr == "scaled_dot_product_attention"
                and isinstance(func.value, ast.Name) and g.get(func.value.id) is F
                or isinstance(func, ast.Name) and g.get(func.id) is F.scaled_dot_product_attention):
            return True
        if (args[1:3] == [q, k] and isinstance(func, ast.Name) and func.id not in g
                and _set_from_interfaces(fdef, func.id, g)):
            return True
    return False


def _set_from_interfaces(fdef: ast.FunctionDef, local: str, g: dict) -> bool:
    """Is every assignment of ``local`` ``ALL_ATTENTION_FUNCTIONS.get_interface(...)`` or
    ``ALL_ATTENTION_FUNCTIONS[...]`` (there is at least one)?"""
    values = []
    for n in ast.walk(fdef):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == local for t in n.targets):
            values.append(n.value)
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == local:
            values.append(n.value)
        elif isinstance(n, (ast.AugAssign, ast.For, ast.With, ast.NamedExpr)) and _uses(n, {local}):
            return False
    if not values or not hasattr(g.get(INTERFACES), "get_interface"):
        return False

    def from_interfaces(v: ast.AST | None) -> bool:
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "get_interface":
            v = v.func.value
        elif isinstance(v, ast.Subscript):
            v = v.value
        else:
            return False
        return isinstance(v, ast.Name) and v.id == INTERFACES

    return all(from_interfaces(v) for v in values)


# ------------------------------------------------------------------ the pending pair (runtime)
class PendingPair:
    """q and k before their rotation, with the table, and how to rotate them if needed."""

    __slots__ = ("q", "k", "cos", "sin", "rotate", "rotated")

    def __init__(self, q, k, cos, sin, rotate):
        self.q, self.k, self.cos, self.sin, self.rotate = q, k, cos, sin, rotate
        self.rotated = None

    def materialize(self, index: int) -> torch.Tensor:
        if self.rotated is None:
            self.rotated = self.rotate(self.q, self.k, self.cos, self.sin)
        return self.rotated[index]


class Pending:
    """One of the pair (0: q, 1: k), as the rotary function returned it in the fused variant."""

    __slots__ = ("pair", "index")

    def __init__(self, pair: PendingPair, index: int):
        self.pair, self.index = pair, index


def _real(x: Any) -> Any:
    return x.pair.materialize(x.index) if isinstance(x, Pending) else x


def _fusable(query: Any, key: Any) -> PendingPair | None:
    if isinstance(query, Pending) and isinstance(key, Pending) and query.pair is key.pair \
            and query.index == 0 and key.index == 1:
        return query.pair
    return None


def _table_ok(x: torch.Tensor, t: torch.Tensor) -> bool:
    return t.dim() >= 2 and all(s == 1 for s in t.shape[:-2]) and tuple(t.shape[-2:]) == tuple(x.shape[-2:])


def _deferred_rotary(k: KernelOp, rotate: Callable[..., Any]) -> Callable[..., Any]:
    dtype, head_dims = k.dtype, k.dims("D")

    def deferred(q, k_, cos, sin, *args, **kwargs):
        if (not args and not kwargs and all(isinstance(t, torch.Tensor) for t in (q, k_, cos, sin))
                and q.dim() == 4 and k_.dim() == 4 and q.dtype == dtype and k_.dtype == dtype
                and cos.dtype == dtype and sin.dtype == dtype and tuple(cos.shape) == tuple(sin.shape)
                and (not head_dims or q.shape[-1] in head_dims) and q.shape[-1] % 2 == 0
                and q.shape[0] == k_.shape[0] and q.shape[2:] == k_.shape[2:] and q.shape[1] % k_.shape[1] == 0
                and _table_ok(q, cos) and q.device == k_.device == cos.device == sin.device):
            pair = PendingPair(q, k_, cos, sin, rotate)
            return Pending(pair, 0), Pending(pair, 1)
        return rotate(q, k_, cos, sin, *args, **kwargs)

    return deferred


def _run_fused(k: KernelOp, pair: PendingPair, value: Any, causal: bool, scale: Any) -> torch.Tensor | None:
    q, key = pair.q, pair.k
    if not (isinstance(value, torch.Tensor) and value.dtype == q.dtype and tuple(value.shape) == tuple(key.shape)
            and value.device == q.device and (scale is None or isinstance(scale, (int, float)))):
        return None
    s, d = q.shape[-2:]
    return k.op(q, key, value, pair.cos.reshape(s, d), pair.sin.reshape(s, d), bool(causal),
                None if scale is None else float(scale))


def _fused_sdpa(k: KernelOp, inner: Callable[..., Any]) -> Callable[..., Any]:
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False):
        pair = _fusable(query, key)
        if pair is not None and attn_mask is None and dropout_p == 0.0 and (
                enable_gqa or pair.q.shape[1] == pair.k.shape[1]):
            out = _run_fused(k, pair, value, is_causal, scale)
            if out is not None:
                return out
        extra = {"enable_gqa": True} if enable_gqa else {}
        return inner(_real(query), _real(key), value, attn_mask=attn_mask, dropout_p=dropout_p,
                     is_causal=is_causal, scale=scale, **extra)

    return scaled_dot_product_attention


def _fused_interfaces(k: KernelOp, interfaces: Any) -> Any:
    """A stand-in for transformers' ``ALL_ATTENTION_FUNCTIONS`` (or our copy of it) whose
    functions take the pending pair: the ``"sdpa"`` one runs the fused op where transformers'
    SDPA path would run plain causal or full attention; everything else gets rotated q and k."""

    def wrap(name: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
        ignored = sdpa_ignores(fn) if name == "sdpa" else frozenset()

        def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                              is_causal=None, position_bias=None, **kwargs):
            pair = _fusable(query, key)
            if (pair is not None and name == "sdpa" and attention_mask is None
                    and hf_plain_attention(dropout, position_bias, kwargs, ignored)):
                out = _run_fused(k, pair, value, hf_causal(module, is_causal, pair.q), scaling)
                if out is not None:
                    return out.transpose(1, 2).contiguous(), None
            extra = {} if is_causal is None else {"is_causal": is_causal}
            if position_bias is not None:
                extra["position_bias"] = position_bias
            return fn(module, _real(query), _real(key), value, attention_mask, dropout=dropout, scaling=scaling,
                      **extra, **kwargs)
        return attention_forward

    class FusedAttentionFunctions(dict):
        def get_interface(self, name, default):
            return wrap(name, interfaces.get_interface(name, default))

        def __getitem__(self, name):
            return wrap(name, interfaces[name])

    return FusedAttentionFunctions(dict(interfaces))


# ------------------------------------------------------------------ the probe
_PROBED: dict[int, bool] = {}


def rotary_probe(fn: Callable[..., Any]) -> bool:
    """Does ``fn(q, k, cos, sin)`` compute the rotate_half rotation of q and k (cos/sin given as
    transformers passes them, [1, S, D])?  Small random fp32 CPU tensors."""
    key = id(fn)
    if key not in _PROBED:
        from ..problems.attention_rotary import rotate

        gen = torch.Generator().manual_seed(4321)
        q, k = torch.randn(2, 4, 5, 8, generator=gen), torch.randn(2, 2, 5, 8, generator=gen)
        angle = torch.rand(1, 5, 8, generator=gen) * 6.0
        cos, sin = angle.cos(), angle.sin()
        try:
            with torch.no_grad():
                out = fn(q, k, cos, sin)
            ok = (isinstance(out, (tuple, list)) and len(out) == 2
                  and all(isinstance(o, torch.Tensor) and o.shape == want.shape
                          and _rel_error(o, want) <= PROBE_TOLERANCE[torch.float32]
                          for o, want in zip(out, (rotate(q, cos[0], sin[0]), rotate(k, cos[0], sin[0])))))
        except Exception:  # a function that cannot take these shapes is not the rotary we fuse
            ok = False
        _PROBED[key] = ok
    return _PROBED[key]


# ------------------------------------------------------------------ the method
def fused_method(inner: types.FunctionType, names: dict[str, Any], fused: KernelOp,
                 rot: KernelOp | None) -> types.FunctionType | None:
    """``inner`` as a method that runs the fused op on calls whose guards are None, and ``inner``
    with ``names`` rebound (the separate paths) on the others; None where the source or the
    probe does not confirm the pair."""
    site = pair_site(inner)
    if site is None:
        return None
    g = inner.__globals__
    original = g[site.rotary]
    if not rotary_probe(original):
        return None
    rotate = _rotary_replacement(rot, original, True) if rot is not None else original
    fused_names = dict(names)
    fused_names[site.rotary] = _deferred_rotary(fused, rotate)
    for name in _code_names(inner.__code__):
        value = g.get(name)
        if value is F:  # our functional proxy (SDPA and gelu replaced) where ``names`` has one
            functional = names.get(name, F)
            fused_names[name] = _functional_proxy({
                "scaled_dot_product_attention": _fused_sdpa(fused, functional.scaled_dot_product_attention),
                "gelu": functional.gelu})
        elif value is F.scaled_dot_product_attention:
            fused_names[name] = _fused_sdpa(fused, names.get(name, value))
    interfaces = g.get(INTERFACES)
    if hasattr(interfaces, "get_interface"):
        fused_names[INTERFACES] = _fused_interfaces(fused, names.get(INTERFACES, interfaces))
    plain = _rebound(inner, names) if names else inner
    with_op = _rebound(inner, fused_names)
    guards = site.guards
    if not guards:
        return with_op

    def dispatch(*args, **kwargs):
        for param, position, default in guards:
            value = kwargs[param] if param in kwargs else (
                args[position] if 0 <= position < len(args) else default)
            if value is not None:
                return plain(*args, **kwargs)
        return with_op(*args, **kwargs)

    dispatch.__name__, dispatch.__qualname__ = inner.__name__, inner.__qualname__
    dispatch.__doc__ = inner.__doc__
    return dispatch
