"""Recognizer for attention written out op by op in a forward (MPT's ``MptAttention``): one
``attention_masked`` problem for the chain, as ``integrate.scores_attention`` places it.

Among one scope's ops, in the order they ran (views and other metadata ops aside, and module
calls that run nothing else, such as eval-mode dropout):

    matmul(q [B,H,S,D], k^T [B,H,D,S])      the scores
    mul / div by a scalar                   the scale (at most one)
    add / masked_fill                       a position bias, a mask (at least one of them)
    softmax over the last dimension         (exactly one, the casts around it are metadata ops)
    matmul(weights [B,H,S,S], v [B,H,S,D])  the output

All of these ops (and the metadata ops between them) map to one instance: additive, per query
when the bias or mask has more than one row (a causal mask does).  A chain with as many keys as
queries only: the problem's shape has one sequence length.
"""
from __future__ import annotations

from .recognize import METADATA_OPS, SOFTMAX_OPS, Instance, Node, _arg, _concrete, _dtype, make_shape

SCALE_OPS = {"aten::mul", "aten::div"}
BIAS_OPS = {"aten::add", "aten::masked_fill"}


def _quiet_scope(node: Node) -> bool:
    """A module call that ran only metadata ops (an eval-mode ``nn.Dropout``)."""
    return all((c.scope is not None and _quiet_scope(c)) or (c.scope is None and c.name in METADATA_OPS)
               for c in node.children)


def _chain(kids: list[Node], start: int, default_dtype: str) -> tuple[list[Node], Instance] | None:
    first = kids[start]
    q, kt = _arg(first, 0), _arg(first, 1)
    if first.name != "aten::matmul" or not q or not kt or len(q) != 4 or len(kt) != 4:
        return None
    B, H, S, D = q
    if kt != [B, H, D, S]:
        return None
    scores = [B, H, S, S]
    nodes, scaled, extras, softmaxes = [first], 0, [], 0
    for node in kids[start + 1:]:
        nodes.append(node)
        if node.scope is not None:
            if not _quiet_scope(node):
                return None
            continue
        if node.name in METADATA_OPS:
            continue
        if node.name in SCALE_OPS and not softmaxes and _arg(node, 0) == scores and not _arg(node, 1):
            scaled += 1
        elif node.name in BIAS_OPS and not softmaxes and _arg(node, 0) == scores and _arg(node, 1):
            extras.append(_arg(node, 1))
        elif node.name == "aten::add" and not softmaxes and _arg(node, 1) == scores and _arg(node, 0):
            extras.append(_arg(node, 0))  # bias + scores
        elif node.name in SOFTMAX_OPS and _arg(node, 0) == scores and _concrete(node, 1) in (-1, 3):
            softmaxes += 1
        elif node.name == "aten::matmul" and _arg(node, 0) == scores and _arg(node, 1) == [B, H, S, D]:
            if softmaxes != 1 or scaled > 1 or not extras:
                return None
            per_query = int(any(len(e) >= 2 and e[-2] > 1 for e in extras))
            inst = Instance("attention_masked", _dtype(first, 0, default_dtype),
                            [(make_shape("attention_masked", B, H, H, S, D, 1, per_query), 1)],
                            notes=(f"attention written out: scores, {len(extras)} added or filled "
                                   f"({', '.join('x'.join(map(str, e)) for e in extras)}), softmax, @ v",))
            return nodes, inst
        else:
            return None
    return None


def pair_scores_attention(parent: Node, default_dtype: str) -> dict[int, Instance]:
    """Written-out attention among ``parent``'s children: map every node of each chain (by id)
    to its one ``attention_masked`` instance."""
    out: dict[int, Instance] = {}
    kids = parent.children
    i = 0
    while i < len(kids):
        found = _chain(kids, i, default_dtype) if kids[i].scope is None else None
        if found is None:
            i += 1
            continue
        nodes, inst = found
        for node in nodes:
            out[id(node)] = inst
        i += len(nodes)
    return out
