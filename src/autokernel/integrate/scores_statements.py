"""Which statements of a forward are attention written out (``scores_attention`` rewrites them).

In one list of statements, in order:

* the scores, one of ``s = torch.matmul(Q, K.transpose(-1, -2)) * C`` (or ``Q @ K.transpose(-2,
  -1)``, ``C * ...``, ``... / C``, no scale at all: MPT's, GPT-Neo's), ``s = torch.bmm(Q,
  K.transpose(-1, -2) / C)`` (the scale on an operand: ``K.transpose(...) * C``, ``Q * C``;
  DeBERTa-v2's; ``torch.bmm``: heads folded into the batch) or ``s = BIAS.baddbmm(batch1=Q,
  batch2=KT, beta=E, alpha=C)`` (or ``torch.baddbmm(BIAS, Q, KT, ...)``, positional or not:
  BLOOM's, its ALiBi bias added by the product; heads folded into the batch, ``KT`` the keys
  transposed; ``torch.bmm(Q, KT)`` too); where the product has no scale, the statement right
  after may apply it: ``s = s / C``, ``s = s * C`` or ``s = C * s`` (GPT-J's ``attn_weights =
  attn_weights / self.scale_attn``, the same as the scale on the product), or the last statement
  before the softmax (CodeGen's ``(s + mask) / C`` as transformers 5.17 wrote it: that statement
  runs with the others on zero scores, so the op gets the mask divided by C too);
* before the softmax, only statements that add to the scores (``s = s + e``, ``s = e + s``), fill
  them with the dtype's lowest value (``s = s.masked_fill(m, L)``, ``s = torch.where(m, s, L)``,
  ``s = torch.where(m, L, s)``) or, where heads are folded into the batch, view them under a new
  name or their own (``t = s.view(a, b, ...)``, ``t = s.reshape(...)``: BLOOM's [B*H, S, S] as
  [B, H, S, S]), in ``if`` blocks or not; ``L`` is ``torch.finfo(X.dtype).min`` (``X`` one of
  Q, K or the scores' names), a name an earlier statement in between set to one of these and
  nothing else sets, or ``torch.tensor(L, dtype=X.dtype, ...)``.  They may read the scores'
  dtype and device, and their shape (``.size()``, ``.shape``, ``.dim()``), nothing else of them;
* ``w = <...>softmax(t.float(), dim=-1).to(X.dtype)`` (or ``softmax(t, dim=-1,
  dtype=torch.float32)``, or ``softmax(t, dim=-1)`` / ``nn.Softmax(dim=-1)(t)`` in the scores'
  dtype), ``t`` the scores under
  any of their names, ``X`` one of Q, K, V; optionally ``w = w.to(X.dtype)`` and ``w =
  <...>dropout(w, ...)`` (``self.attention_dropout(w)`` too), then any head masks: ``if N is not
  None: w = w * N`` (or ``N * w``; no ``else``; GPT-J's, BLOOM's old ``head_mask``), ``N`` a
  plain name nothing in the chain assigns: the rewrite takes the op's path only where each ``N``
  is None, and runs the statements as written otherwise;
* where heads are folded, views of the weights under new names, then ``o = torch.bmm(w2, V)``
  (``w2`` may be viewed in place: ``torch.bmm(w.view(-1, S, S), V)``); otherwise ``o =
  torch.matmul(w, V)`` (or ``w @ V``) right after,

``Q``, ``K``/``KT``, ``V`` and the names of the scores plain names no other statement in between
assigns, ``C`` a name, attribute chain, constant or ``.to(...)`` of one, ``BIAS`` and ``E``
names, attribute chains or constants, and nothing after reads the scores, nor the weights but to
return them (the weights may take the scores' name: GPT-Neo's ``attn_weights``).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from .rewrite import pure


@dataclass
class Chain:
    """One written-out attention in a list of statements: ``body[first:last + 1]``."""

    q: str
    k: str  # the keys' name: K, or KT where they are transposed (``kt``)
    scale: ast.expr
    bias: ast.expr | None  # BLOOM's: what baddbmm adds the product to
    beta: ast.expr | None
    folded: bool  # heads folded into the batch: 3-D q, k, v (baddbmm, bmm)
    scores: list[str]  # the scores' name, then the names of their views
    weights: list[str] = field(default_factory=list)  # likewise the weights'
    read: str = ""  # the scores' name the softmax reads
    v: str = ""
    out: str = ""
    first: int = 0  # the scores statement
    softmax: int = 0  # the softmax statement
    last: int = 0  # the output statement
    kt: bool = True  # ``k`` names the keys transposed (baddbmm's, bmm's batch2)
    divide: bool = False  # the scores are divided by ``scale``
    full: bool = False  # the statements in between read the scores' shape: start them full-sized
    to_v: bool = False  # the weights end cast to V's dtype (GPT-Neo's fp32 scores, V in the model's)
    scaled: bool = True  # the scores statement (or baddbmm's alpha) gives the scale, or it has none to give
    scale_after: int = 0  # 1 where the statement after the scores scales them (GPT-J's ``s = s / C``)
    scale_last: int = 0  # 1 where the statement before the softmax scales them, after the mask (CodeGen's)
    unless: list[str] = field(default_factory=list)  # head masks: the op's path needs each None


# ------------------------------------------------------------------ small matchers
def name_of(node: Any) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def uses(node: ast.AST, names: str | set[str]) -> bool:
    names = {names} if isinstance(names, str) else names
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _negative(node: ast.expr, value: int) -> bool:
    """Is ``node`` the constant ``-value`` (written ``-value``: a minus and the number)?"""
    return ((isinstance(node, ast.Constant) and node.value == -value)
            or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
                and isinstance(node.operand, ast.Constant) and node.operand.value == value))


def _callee(node: ast.expr) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    return node.func.attr if isinstance(node.func, ast.Attribute) else name_of(node.func)


def _method_of(node: ast.expr, method: str) -> str | None:
    """``x`` of ``x.method(...)``."""
    if _callee(node) == method and isinstance(node.func, ast.Attribute):
        return name_of(node.func.value)
    return None


def _torch_call(node: ast.expr, fn: str) -> bool:
    return _callee(node) == fn and isinstance(node.func, ast.Attribute) and name_of(node.func.value) == "torch"


def _assigned(stmt: ast.stmt) -> str | None:
    """``x`` of ``x = ...``."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        return name_of(stmt.targets[0])
    return None


def _matmul(node: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """(a, b) of ``torch.matmul(a, b)`` or ``a @ b``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return node.left, node.right
    if _torch_call(node, "matmul") and len(node.args) == 2 and not node.keywords:
        return node.args[0], node.args[1]
    return None


def _transposed(node: ast.expr) -> str | None:
    """``K`` of ``K.transpose(-1, -2)`` (or ``(-2, -1)``)."""
    if _method_of(node, "transpose") and len(node.args) == 2 and not node.keywords:
        a, b = node.args
        if _negative(a, 1) and _negative(b, 2) or _negative(a, 2) and _negative(b, 1):
            return name_of(node.func.value)
    return None


# ------------------------------------------------------------------ the chain's parts
def _scale_expr(node: ast.expr) -> bool:
    """A scale: a name, attribute chain or constant, or ``.to(...)`` of one (DeBERTa-v2's
    ``scale.to(dtype=q.dtype)``), evaluated a second time where the original statements run."""
    if _callee(node) == "to" and isinstance(node.func, ast.Attribute):
        return pure(node.func.value) and all(pure(a) for a in [*node.args, *(kw.value for kw in node.keywords)])
    return pure(node)


def _scaled(node: ast.expr) -> tuple[ast.expr, ast.expr | None, bool]:
    """(x, C, divide) of ``x * C``, ``C * x`` or ``x / C``; (node, None, False) otherwise.  Of
    ``a * b`` with both a possible scale, the one that is no plain name is the scale (``self.scale
    * q``), else the second."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _scale_expr(node.right):
        return node.left, node.right, True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        options = [(x, c) for x, c in ((node.left, node.right), (node.right, node.left)) if _scale_expr(c)]
        if len(options) == 2 and isinstance(node.right, ast.Name) and not isinstance(node.left, ast.Name):
            options.reverse()
        if options:
            return options[0][0], options[0][1], False
    return node, None, False


def _product(node: ast.expr) -> tuple[ast.expr, ast.expr, bool] | None:
    """(a, b, folded) of ``torch.matmul(a, b)``, ``a @ b`` or ``torch.bmm(a, b)``."""
    pair = _matmul(node)
    if pair is not None:
        return pair[0], pair[1], False
    if _torch_call(node, "bmm") and len(node.args) == 2 and not node.keywords:
        return node.args[0], node.args[1], True
    return None


def _scores(stmt: ast.stmt) -> Chain | None:
    """The chain as far as its scores statement tells (``first`` and the rest still unset)."""
    s = _assigned(stmt)
    if s is None:
        return None
    value = stmt.value
    product, scale, divide = _scaled(value)
    found = _product(product)
    if found is None:
        if scale is not None:
            return None
        return _baddbmm(value, s)
    a, b, folded = found
    (qx, qscale, qdiv), (kx, kscale, kdiv) = _scaled(a), _scaled(b)
    if sum(c is not None for c in (scale, qscale, kscale)) > 1:
        return None
    q, key, kt = name_of(qx), _transposed(kx), False
    if key is None and folded:
        key, kt = name_of(kx), True  # bmm(Q, KT): the keys transposed by their shape
    if not q or not key:
        return None
    found = next(((c, d) for c, d in ((scale, divide), (qscale, qdiv), (kscale, kdiv)) if c is not None), None)
    scale, divide = found or (ast.Constant(value=1), False)
    return Chain(q, key, scale, None, None, folded, [s], kt=kt, divide=divide, scaled=found is not None)


def _baddbmm(value: ast.expr, s: str) -> Chain | None:
    """``BIAS.baddbmm(Q, KT, beta=E, alpha=C)`` or ``torch.baddbmm(BIAS, Q, KT, ...)``, the
    operands positional or by keyword."""
    if _callee(value) != "baddbmm" or not isinstance(value.func, ast.Attribute):
        return None
    if name_of(value.func.value) == "torch":
        positional, args = ["input", "batch1", "batch2"], {}
    else:
        positional, args = ["batch1", "batch2"], {"input": value.func.value}
    if len(value.args) > len(positional):
        return None  # beta and alpha are keyword-only
    args.update(zip(positional, value.args))
    for kw in value.keywords:
        if kw.arg not in ("input", "batch1", "batch2", "beta", "alpha") or kw.arg in args:
            return None
        args[kw.arg] = kw.value
    q, kt = name_of(args.get("batch1")), name_of(args.get("batch2"))
    bias = args.get("input")
    beta, alpha = args.get("beta", ast.Constant(value=1)), args.get("alpha", ast.Constant(value=1))
    if not q or not kt or bias is None or not all(pure(e) for e in (bias, beta, alpha)):
        return None
    return Chain(q, kt, alpha, bias, beta, True, [s])


META_ATTRS = {"dtype", "device", "shape", "ndim"}
META_METHODS = {"size", "dim"}
SHAPE_READS = {"shape", "ndim", "size", "dim"}


def _meta_reads(node: ast.AST, names: set[str]) -> dict[int, str]:
    """id -> what is read, of the names in ``names`` under ``node`` read only for their
    metadata: ``n.dtype``, ``n.device``, ``n.shape``, ``n.ndim``, ``n.size(...)``, ``n.dim()``."""
    out: dict[int, str] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in names:
            if n.attr in META_ATTRS:
                out[id(n.value)] = n.attr
            elif n.attr in META_METHODS:
                calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and c.func is n]
                if calls:
                    out[id(n.value)] = n.attr
    return out


def _free_of(node: ast.AST, names: set[str]) -> bool:
    """Does ``node`` read nothing of ``names`` but their metadata?"""
    meta = _meta_reads(node, names)
    return not any(isinstance(n, ast.Name) and n.id in names and id(n) not in meta for n in ast.walk(node))


def _lowest(node: ast.expr, dtypes: set[str], lowest: set[str]) -> bool:
    """The lowest value of the scores' dtype: ``torch.finfo(X.dtype).min`` (``X`` in ``dtypes``),
    a name in ``lowest``, or ``torch.tensor(<one of these>, dtype=X.dtype, device=...)``."""
    if isinstance(node, ast.Name):
        return node.id in lowest
    if isinstance(node, ast.Attribute) and node.attr == "min" and _callee(node.value) == "finfo":
        call = node.value
        return (len(call.args) == 1 and not call.keywords and isinstance(call.args[0], ast.Attribute)
                and call.args[0].attr == "dtype" and name_of(call.args[0].value) in dtypes)
    if _torch_call(node, "tensor") and len(node.args) == 1 and _lowest(node.args[0], dtypes, lowest):
        kw = {k.arg: k.value for k in node.keywords}
        dtype = kw.get("dtype")
        return (set(kw) <= {"dtype", "device"} and isinstance(dtype, ast.Attribute) and dtype.attr == "dtype"
                and name_of(dtype.value) in dtypes and all(pure(v) for v in kw.values()))
    return False


def _added_or_filled(stmt: ast.Assign, s: str, names: set[str], dtypes: set[str], lowest: set[str]) -> list[ast.expr]:
    """The operands that are the scores (to be let through) of ``s = s + e``, ``s = e + s``,
    ``s = s.masked_fill(m, L)``, ``s = torch.where(m, s, L)`` or ``s = torch.where(m, L, s)``,
    ``e`` and ``m`` free of the scores' ``names`` (but their metadata), ``L`` the lowest value;
    [] for any other statement."""
    v = stmt.value
    if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
        for mine, other in ((v.left, v.right), (v.right, v.left)):
            if name_of(mine) == s and _free_of(other, names):
                return [mine]
        return []
    if (_method_of(v, "masked_fill") == s and len(v.args) == 2 and not v.keywords
            and _free_of(v.args[0], names) and _lowest(v.args[1], dtypes, lowest)):
        return [v.func.value]
    if _torch_call(v, "where") and len(v.args) == 3 and not v.keywords and _free_of(v.args[0], names):
        for mine, fill in ((v.args[1], v.args[2]), (v.args[2], v.args[1])):
            if name_of(mine) == s and _lowest(fill, dtypes, lowest):
                return [mine]
    return []


def _scale_of(stmt: ast.stmt, s: str) -> tuple[ast.expr, bool] | None:
    """(C, divide) of ``s = s / C``, ``s = s * C`` or ``s = C * s`` (GPT-J's ``attn_weights =
    attn_weights / self.scale_attn`` right after the product), ``C`` a scale that does not read ``s``."""
    v = stmt.value if _assigned(stmt) == s else None
    if not (isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Div, ast.Mult))):
        return None
    pairs = [(v.left, v.right)] + ([(v.right, v.left)] if isinstance(v.op, ast.Mult) else [])
    for x, c in pairs:
        if name_of(x) == s and _scale_expr(c) and not uses(c, s):
            return c, isinstance(v.op, ast.Div)
    return None


def _head_mask_of(stmt: ast.stmt, w: str, taken: set[str]) -> str | None:
    """``N`` of ``if N is not None: w = w * N`` (or ``N * w``; no ``else``): a head mask, ``N`` a
    plain name other than those in ``taken``.  The op's path is for calls where ``N`` is None."""
    if not (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1):
        return None
    test = stmt.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        return None
    n = name_of(test.left)
    inner = stmt.body[0]
    if not n or n in taken or n == w or _assigned(inner) != w:
        return None
    v = inner.value
    if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Mult)):
        return None
    if {name_of(v.left), name_of(v.right)} != {w, n}:
        return None
    return n


def _view_of(stmt: ast.stmt, names: list[str]) -> str | None:
    """``t`` of ``t = n.view(a, b, ...)`` or ``t = n.reshape(...)``, ``n`` one of ``names``, the
    sizes free of them but their metadata (a view as another dtype, ``n.view(dtype)``, is no view
    of the values)."""
    t = _assigned(stmt)
    if t is None:
        return None
    return t if _viewed(stmt.value, names) else None


def _viewed(v: ast.expr, names: list[str]) -> bool:
    for method, least in (("view", 2), ("reshape", 1)):
        if (_method_of(v, method) in names and len(v.args) >= least and not v.keywords
                and all(_free_of(a, set(names)) for a in v.args)):
            return True
    return False


def _between_ok(stmts: list[ast.stmt], chain: Chain, fixed: set[str]) -> bool:
    """Do the statements between the scores and the softmax touch the scores only by adding to
    them, filling them with the lowest value or (heads folded) viewing them, reading nothing else
    of them but their metadata, and leave the names in ``fixed`` as they are?  Adds the views'
    names to ``chain.scores``; sets ``chain.full`` where they read the scores' shape."""
    names = chain.scores
    assigns = [n for stmt in stmts for n in ast.walk(stmt) if isinstance(n, ast.Assign)]
    grew = chain.folded
    while grew:  # views of views, in whatever order the walk meets them
        grew = False
        for node in assigns:
            t = _view_of(node, names)
            if t is not None and t not in names:
                names.append(t)
                grew = True
    allowed: set[int] = set()
    lowest: set[str] = set()  # names holding the lowest value here (set by a statement above)
    dtypes = {chain.q, chain.k} | set(names)
    for stmt in stmts:
        stored = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        target = _assigned(stmt)
        proven = target if target is not None and _lowest(stmt.value, dtypes, lowest) else None
        lowest -= stored
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Assign):
                continue
            target = _assigned(node)
            if target not in names:
                continue
            through = _added_or_filled(node, target, set(names), dtypes, lowest)
            if not through and chain.folded and _view_of(node, names) is not None:
                through = [node.value.func.value]
            if through:
                allowed.update(id(n) for n in [*node.targets, *through])
        if proven is not None:
            lowest.add(proven)
    meta = {}
    for stmt in stmts:
        meta.update(_meta_reads(stmt, set(names)))
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Global,
                                 ast.Nonlocal)):
                return False
            if isinstance(node, ast.Name):
                if node.id in names and id(node) not in allowed and id(node) not in meta:
                    return False
                if node.id in fixed and not isinstance(node.ctx, ast.Load):
                    return False
    chain.full = chain.full or any(what in SHAPE_READS for what in meta.values())
    return True


def _fp32(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in ("float32", "float") and name_of(node.value) == "torch"


def _softmax_of(stmt: ast.stmt) -> tuple[str, str, str | None] | None:
    """(w, t, X) of ``w = <...>softmax(t.float(), dim=-1).to(X.dtype)`` or ``w = <...>softmax(t,
    dim=-1, dtype=torch.float32).to(X.dtype)``; (w, t, None) of ``w = <...>softmax(t, dim=-1)``
    (in the scores' dtype)."""
    w = _assigned(stmt)
    if w is None:
        return None
    soft, like = stmt.value, None
    to = soft
    if (_callee(to) == "to" and isinstance(to.func, ast.Attribute) and len(to.args) == 1 and not to.keywords
            and isinstance(to.args[0], ast.Attribute) and to.args[0].attr == "dtype" and name_of(to.args[0].value)):
        soft, like = to.func.value, to.args[0].value.id
    module = _softmax_module_call(soft)
    if module is not None:  # ``nn.Softmax(dim=-1)(t)`` (CodeGen's), in the scores' dtype
        return (w, module, None) if like is None else None
    if _callee(soft) != "softmax" or not soft.args or any(kw.arg not in ("dim", "dtype") for kw in soft.keywords):
        return None
    first, kw = soft.args[0], {k.arg: k.value for k in soft.keywords}
    if "dtype" in kw:
        t = name_of(first) if _fp32(kw["dtype"]) and like else None
    elif like:
        t = _method_of(first, "float") if not first.args and not first.keywords else None
    else:
        t = name_of(first)
    dims = list(soft.args[1:]) + ([kw["dim"]] if "dim" in kw else [])
    if t is None or len(dims) != 1 or not _negative(dims[0], 1):
        return None
    return w, t, like


def _softmax_module_call(node: ast.expr) -> str | None:
    """``t`` of ``<...>Softmax(dim=-1)(t)``: a softmax module made and called in one expression."""
    if not (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords and _callee(node.func) == "Softmax"):
        return None
    make = node.func
    dims = list(make.args) + [kw.value for kw in make.keywords if kw.arg == "dim"]
    if len(dims) != 1 or len(make.args) + len(make.keywords) != 1 or not _negative(dims[0], 1):
        return None
    return name_of(node.args[0])


def _cast_of(stmt: ast.stmt, w: str) -> str | None:
    """``X`` of ``w = w.to(X.dtype)``."""
    v = stmt.value if _assigned(stmt) == w else None
    if (_method_of(v, "to") == w and len(v.args) == 1 and not v.keywords and isinstance(v.args[0], ast.Attribute)
            and v.args[0].attr == "dtype"):
        return name_of(v.args[0].value)
    return None


def _dropout_of(stmt: ast.stmt, w: str) -> bool:
    """``w = <...>dropout(w, ...)`` (``F.dropout``, ``self.attention_dropout``)."""
    return (_assigned(stmt) == w and (_callee(stmt.value) or "").endswith("dropout") and bool(stmt.value.args)
            and name_of(stmt.value.args[0]) == w)


def _output_of(stmt: ast.stmt, weights: list[str], folded: bool) -> tuple[str, str] | None:
    """(o, V) of ``o = torch.bmm(w, V)`` (heads folded; ``w`` may be viewed there, sized by its own
    sizes) or ``o = torch.matmul(w, V)``."""
    o = _assigned(stmt)
    if o is None:
        return None
    if folded:
        call = stmt.value
        pair = call.args if _torch_call(call, "bmm") and len(call.args) == 2 and not call.keywords else None
    else:
        pair = _matmul(stmt.value)
    if pair is None or not name_of(pair[1]):
        return None
    if name_of(pair[0]) not in weights and not (folded and _viewed(pair[0], weights)):
        return None
    return o, pair[1].id


def _read_elsewhere(fdef: ast.FunctionDef, chain: list[ast.stmt], scores: list[str], weights: list[str]) -> bool:
    """Does ``fdef`` read the scores outside the chain, or the weights otherwise than by returning
    them (the op's path leaves the mask in the scores' names and None in the weights')?  A name
    of both (the weights in the scores' name) is the weights' after the chain."""
    inside = {id(n) for stmt in chain for n in ast.walk(stmt)}
    returned = {id(e) for n in ast.walk(fdef) if isinstance(n, ast.Return) and n.value is not None
                for e in (n.value.elts if isinstance(n.value, ast.Tuple) else [n.value])}
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside
               and ((n.id in scores and n.id not in weights) or (n.id in weights and id(n) not in returned))
               for n in ast.walk(fdef))


# ------------------------------------------------------------------ the whole chain
def find_chain(body: list[ast.stmt], fdef: ast.FunctionDef) -> Chain | None:
    """The first written-out attention in ``body``, where its scores statement is the first one."""
    for i, stmt in enumerate(body):
        chain = _scores(stmt)
        if chain is None:
            continue
        chain.first = i
        if not chain.scaled and chain.bias is None and i + 1 < len(body):
            after = _scale_of(body[i + 1], chain.scores[0])  # the scale in a statement of its own
            if after is not None:
                chain.scale, chain.divide = after
                chain.scaled, chain.scale_after = True, 1
        j = next((j for j in range(i + 1, len(body)) if _softmax_of(body[j])), None)
        if j is None:
            return None
        if not chain.scaled and chain.bias is None and j - 1 > i:
            last = _scale_of(body[j - 1], chain.scores[0])  # CodeGen's ``(s + mask) / C``
            if last is not None:
                chain.scale, chain.divide = last
                chain.scaled, chain.scale_last = True, 1
        w, t, like = _softmax_of(body[j])
        chain.softmax, chain.weights = j, [w]
        end, likes = j + 1, [like] if like else []
        if end < len(body) and _cast_of(body[end], w):
            likes.append(_cast_of(body[end], w))
            end += 1
        end += int(end < len(body) and _dropout_of(body[end], w))
        taken = {chain.q, chain.k, *chain.scores}
        while end < len(body) and (n := _head_mask_of(body[end], w, taken)):
            chain.unless.append(n)
            end += 1
        while chain.folded and end < len(body) and (view := _view_of(body[end], chain.weights)):
            chain.weights.append(view)
            end += 1
        output = _output_of(body[end], chain.weights, chain.folded) if end < len(body) else None
        if output is None:
            return None
        chain.out, chain.v, chain.last, chain.read = output[0], output[1], end, t
        chain.to_v = bool(likes) and likes[-1] == chain.v
        fixed = {chain.q, chain.k, chain.v}
        stored = {n.id for stmt in body[i:end + 1] for n in ast.walk(stmt)
                  if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        if (any(x not in fixed for x in likes) or not _between_ok(body[i + 1 + chain.scale_after:j - chain.scale_last], chain, fixed)
                or stored & set(chain.unless) or set(chain.unless) & (set(chain.scores) | set(chain.weights) | fixed)
                or t not in chain.scores or fixed & (set(chain.scores) | set(chain.weights))
                or any(uses(e, set(chain.scores) | set(chain.weights)) for e in (chain.scale, chain.bias, chain.beta)
                       if e is not None)
                or _read_elsewhere(fdef, body[i:end + 1], chain.scores, chain.weights)):
            return None
        return chain
    return None
