"""Which statements of a forward are attention written out (``scores_attention`` rewrites them).

In one list of statements, in order:

* the scores, either ``s = torch.matmul(Q, K.transpose(-1, -2)) * C`` (or ``Q @ K.transpose(-2,
  -1)``, ``C * ...``: MPT's) or ``s = BIAS.baddbmm(batch1=Q, batch2=KT, beta=E, alpha=C)`` (or
  ``torch.baddbmm(BIAS, Q, KT, ...)``, positional or not: BLOOM's, its ALiBi bias added by the
  product; heads folded into the batch, ``KT`` the keys transposed);
* before the softmax, only statements that add to the scores (``s = s + e``, ``s = e + s``), fill
  them (``s = s.masked_fill(m, torch.finfo(...).min)``) or, where heads are folded into the batch,
  view them under a new name (``t = s.view(a, b, ...)``, ``t = s.reshape(...)``: BLOOM's
  [B*H, S, S] as [B, H, S, S]), in ``if`` blocks or not;
* ``w = <...>softmax(t.float(), dim=-1).to(X.dtype)`` (or ``softmax(t, dim=-1,
  dtype=torch.float32)``), ``t`` the scores under any of their names, ``X`` one of Q, K, V;
  optionally ``w = <...>dropout(w, ...)`` (``self.attention_dropout(w)`` too);
* where heads are folded, views of the weights under new names, then ``o = torch.bmm(w2, V)``;
  otherwise ``o = torch.matmul(w, V)`` (or ``w @ V``) right after,

``Q``, ``K``/``KT``, ``V`` and the names of the scores plain names no other statement in between
assigns, ``C``, ``BIAS`` and ``E`` names, attribute chains or constants, and nothing after reads
the scores, nor the weights but to return them.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Chain:
    """One written-out attention in a list of statements: ``body[first:last + 1]``."""

    q: str
    k: str  # the keys' name: K, or KT where they are transposed (heads folded)
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


# ------------------------------------------------------------------ small matchers
def name_of(node: Any) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def pure(node: ast.expr) -> bool:
    """A name, an attribute chain on one, or a constant."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


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
def _scores(stmt: ast.stmt) -> Chain | None:
    """The chain as far as its scores statement tells (``first`` and the rest still unset)."""
    s = _assigned(stmt)
    if s is None:
        return None
    value = stmt.value
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
        for product, scale in ((value.left, value.right), (value.right, value.left)):
            pair = _matmul(product)
            if pair is not None and pure(scale):
                q, key = name_of(pair[0]), _transposed(pair[1])
                if q and key:
                    return Chain(q, key, scale, None, None, False, [s])
        return None
    return _baddbmm(value, s)


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


def _lowest_value(node: ast.expr) -> bool:
    """``torch.finfo(...).min``."""
    return isinstance(node, ast.Attribute) and node.attr == "min" and _callee(node.value) == "finfo"


def _added_or_filled(stmt: ast.Assign, s: str, names: set[str]) -> bool:
    """``s = s + e``, ``s = e + s`` or ``s = s.masked_fill(m, torch.finfo(...).min)``, ``e`` and
    ``m`` free of the scores' ``names``."""
    v = stmt.value
    if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
        return ((name_of(v.left) == s and not uses(v.right, names))
                or (name_of(v.right) == s and not uses(v.left, names)))
    return (_method_of(v, "masked_fill") == s and len(v.args) == 2 and not v.keywords
            and not uses(v.args[0], names) and _lowest_value(v.args[1]))


def _view_of(stmt: ast.stmt, names: list[str]) -> str | None:
    """``t`` of ``t = n.view(a, b, ...)`` or ``t = n.reshape(...)``, ``n`` one of ``names``, the
    sizes free of them (a view as another dtype, ``n.view(dtype)``, is no view of the values)."""
    t = _assigned(stmt)
    if t is None:
        return None
    v = stmt.value
    for method, least in (("view", 2), ("reshape", 1)):
        if (_method_of(v, method) in names and len(v.args) >= least and not v.keywords
                and not any(uses(a, set(names)) for a in v.args)):
            return t
    return None


def _between_ok(stmts: list[ast.stmt], chain: Chain, fixed: set[str]) -> bool:
    """Do the statements between the scores and the softmax touch the scores only by adding to
    them, filling them or (heads folded) viewing them, and leave the names in ``fixed`` as they
    are?  Adds the views' names to ``chain.scores``."""
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
    for node in assigns:
        target = _assigned(node)
        if target in names and (_added_or_filled(node, target, set(names))
                                or (chain.folded and _view_of(node, names) is not None)):
            allowed.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in names)
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Global,
                                 ast.Nonlocal)):
                return False
            if isinstance(node, ast.Name):
                if node.id in names and id(node) not in allowed:
                    return False
                if node.id in fixed and not isinstance(node.ctx, ast.Load):
                    return False
    return True


def _fp32(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in ("float32", "float") and name_of(node.value) == "torch"


def _softmax_of(stmt: ast.stmt) -> tuple[str, str, str] | None:
    """(w, t, X) of ``w = <...>softmax(t.float(), dim=-1).to(X.dtype)`` or ``w = <...>softmax(t,
    dim=-1, dtype=torch.float32).to(X.dtype)``."""
    w = _assigned(stmt)
    to = stmt.value if w else None
    if not (_callee(to) == "to" and isinstance(to.func, ast.Attribute) and len(to.args) == 1 and not to.keywords
            and isinstance(to.args[0], ast.Attribute) and to.args[0].attr == "dtype" and name_of(to.args[0].value)):
        return None
    soft = to.func.value
    if _callee(soft) != "softmax" or not soft.args or any(kw.arg not in ("dim", "dtype") for kw in soft.keywords):
        return None
    first, kw = soft.args[0], {k.arg: k.value for k in soft.keywords}
    if "dtype" in kw:
        t = name_of(first) if _fp32(kw["dtype"]) else None
    else:
        t = _method_of(first, "float") if not first.args and not first.keywords else None
    dims = list(soft.args[1:]) + ([kw["dim"]] if "dim" in kw else [])
    if t is None or len(dims) != 1 or not _negative(dims[0], 1):
        return None
    return w, t, to.args[0].value.id


def _dropout_of(stmt: ast.stmt, w: str) -> bool:
    """``w = <...>dropout(w, ...)`` (``F.dropout``, ``self.attention_dropout``)."""
    return (_assigned(stmt) == w and (_callee(stmt.value) or "").endswith("dropout") and bool(stmt.value.args)
            and name_of(stmt.value.args[0]) == w)


def _output_of(stmt: ast.stmt, weights: list[str], folded: bool) -> tuple[str, str] | None:
    """(o, V) of ``o = torch.bmm(w, V)`` (heads folded) or ``o = torch.matmul(w, V)``."""
    o = _assigned(stmt)
    if o is None:
        return None
    if folded:
        call = stmt.value
        pair = call.args if _torch_call(call, "bmm") and len(call.args) == 2 and not call.keywords else None
    else:
        pair = _matmul(stmt.value)
    if pair is None or name_of(pair[0]) not in weights or not name_of(pair[1]):
        return None
    return o, pair[1].id


def _read_elsewhere(fdef: ast.FunctionDef, chain: list[ast.stmt], scores: list[str], weights: list[str]) -> bool:
    """Does ``fdef`` read the scores outside the chain, or the weights otherwise than by returning
    them (the op's path leaves the mask in the scores' names and None in the weights')?"""
    inside = {id(n) for stmt in chain for n in ast.walk(stmt)}
    returned = {id(e) for n in ast.walk(fdef) if isinstance(n, ast.Return) and n.value is not None
                for e in (n.value.elts if isinstance(n.value, ast.Tuple) else [n.value])}
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside
               and (n.id in scores or (n.id in weights and id(n) not in returned)) for n in ast.walk(fdef))


# ------------------------------------------------------------------ the whole chain
def find_chain(body: list[ast.stmt], fdef: ast.FunctionDef) -> Chain | None:
    """The first written-out attention in ``body``, where its scores statement is the first one."""
    for i, stmt in enumerate(body):
        chain = _scores(stmt)
        if chain is None:
            continue
        chain.first = i
        j = next((j for j in range(i + 1, len(body)) if _softmax_of(body[j])), None)
        if j is None:
            return None
        w, t, like = _softmax_of(body[j])
        chain.softmax, chain.weights = j, [w]
        end = j + 1 + int(j + 1 < len(body) and _dropout_of(body[j + 1], w))
        while chain.folded and end < len(body) and (view := _view_of(body[end], chain.weights)):
            chain.weights.append(view)
            end += 1
        output = _output_of(body[end], chain.weights, chain.folded) if end < len(body) else None
        if output is None:
            return None
        chain.out, chain.v, chain.last, chain.read = output[0], output[1], end, t
        fixed = {chain.q, chain.k, chain.v}
        if (like not in fixed or not _between_ok(body[i + 1:j], chain, fixed) or t not in chain.scores
                or fixed & (set(chain.scores) | set(chain.weights))
                or any(uses(e, set(chain.scores) | set(chain.weights)) for e in (chain.scale, chain.bias, chain.beta)
                       if e is not None)
                or _read_elsewhere(fdef, body[i:end + 1], chain.scores, chain.weights)):
            return None
        return chain
    return None
