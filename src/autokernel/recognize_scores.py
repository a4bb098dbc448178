"""Recognizer for attention written out op by op in a forward (MPT's ``MptAttention``, BLOOM's
``BloomAttention``, GPT-Neo's ``GPTNeoSelfAttention``, DeBERTa-v2's ``DisentangledSelfAttention``,
the old GPT-J's ``GPTJAttention._attn``, its scale a div of its own by a one-element buffer):
one ``attention_masked`` problem for the chain, as ``integrate.scores_attention`` places it.

Among one scope's ops, in the order they ran (views and other metadata ops aside, and module
calls that run nothing else, such as eval-mode dropout):

    mul / div of k^T (or q) by a scalar     the scale, where it is applied to an operand
                                            (DeBERTa-v2's k^T / sqrt(D)), right before the scores
    the scores, one of
      matmul(q [B,H,S,D], k^T [B,H,D,S])
      bmm(q [N,S,D], k^T [N,D,S])            heads folded into the batch
      baddbmm(bias, q [N,S,D], k^T [N,D,S])  BLOOM's: the bias (ALiBi) and the scale (alpha) in one
    mul / div by a scalar                   the scale (at most one in all)
    add / masked_fill / where(m, s, fill)   a position bias, a mask (at least one of them in all)
    softmax over the last dimension         (exactly one, the casts around it are metadata ops)
    matmul or bmm(weights, v)               the output

Before the softmax, ops that read no tensor of the scores' size (the mask's own small ops: its
inversion, a cast, the fill value made a tensor) belong to the chain too.  The scores may be
viewed between these ([N,S,S] as [B,H,S,S] and back: BLOOM's): any [..., S, S] with N rows of
scores in all is the scores.  All of these ops (and the metadata ops between them) map to one
instance: additive, per query when the bias or mask has more than one row (a causal mask does);
B and H those of the first 4-D q or scores (1 and N where none is 4-D).  A chain with as many
keys as queries only: the problem's shape has one sequence length.
"""
from __future__ import annotations

from .recognize import METADATA_OPS, SOFTMAX_OPS, Instance, Node, _arg, _concrete, _dtype, make_shape

SCALE_OPS = {"aten::mul", "aten::div"}
BIAS_OPS = {"aten::add", "aten::masked_fill"}
PRODUCT_OPS = {"aten::matmul", "aten::bmm"}


def _quiet_scope(node: Node) -> bool:
    """A module call that ran only metadata ops (an eval-mode ``nn.Dropout``)."""
    return all((c.scope is not None and _quiet_scope(c)) or (c.scope is None and c.name in METADATA_OPS)
               for c in node.children)


def _numel(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _scores_op(node: Node) -> tuple[list[int], int, int, list[list[int]], int] | None:
    """(lead, S, D, extras, scaled) of the op that makes the scores: ``matmul(q, k^T)`` (q
    [B,H,S,D]), ``bmm(q, k^T)`` (q [N,S,D]) or ``baddbmm(bias, q, k^T)`` (q [N,S,D]; the bias an
    extra, alpha a scale)."""
    if node.scope is not None:
        return None
    if node.name in PRODUCT_OPS:
        q, kt, extras, scaled = _arg(node, 0), _arg(node, 1), [], 0
        if not q or len(q) != (4 if node.name == "aten::matmul" else 3):
            return None
    elif node.name == "aten::baddbmm":
        bias, q, kt = _arg(node, 0), _arg(node, 1), _arg(node, 2)
        if not bias or not q or len(q) != 3:
            return None
        extras, scaled = [bias], int(_concrete(node, 4) not in (None, 1, 1.0))
    else:
        return None
    *lead, S, D = q
    return (lead, S, D, extras, scaled) if kt == [*lead, D, S] else None


def _operand_scaled(kids: list[Node], start: int) -> int | None:
    """Where ``kids[start]`` scales an operand by a scalar (``k^T / C``) and the scores op that
    takes it follows (metadata ops between): that op's index."""
    node = kids[start]
    if node.scope is not None or node.name not in SCALE_OPS or _arg(node, 1):
        return None
    shape = _arg(node, 0)
    for j in range(start + 1, len(kids)):
        nxt = kids[j]
        if nxt.scope is None and nxt.name in METADATA_OPS:
            continue
        if _scores_op(nxt) is not None and shape in (_arg(nxt, 0), _arg(nxt, 1)):
            return j
        return None
    return None


def _chain(kids: list[Node], start: int, default_dtype: str) -> tuple[list[Node], Instance] | None:
    at = _operand_scaled(kids, start)
    end = start if at is None else at
    first = kids[end]
    found = _scores_op(first)
    if found is None:
        return None
    lead, S, D, extras, scaled = found
    scaled += at is not None
    rows = _numel(lead)
    heads = lead if len(lead) == 2 else None  # [B, H]

    def scores(shape: list[int] | None) -> bool:
        nonlocal heads
        if not shape or len(shape) < 3 or shape[-2:] != [S, S] or _numel(shape[:-2]) != rows:
            return False
        heads = heads or (shape[:2] if len(shape) == 4 else None)
        return True

    def values(shape: list[int] | None) -> bool:
        return bool(shape) and len(shape) >= 3 and shape[-2:] == [S, D] and _numel(shape[:-2]) == rows

    def aside(node: Node) -> bool:
        """An op before the softmax that reads nothing of the scores' size (the mask's own)."""
        return (node.name not in SOFTMAX_OPS and node.name not in PRODUCT_OPS
                and all(not shape or _numel(shape) != rows * S * S for shape in node.shapes))

    nodes, softmaxes = kids[start:end + 1], 0
    for node in kids[start + len(nodes):]:
        nodes.append(node)
        if node.scope is not None:
            if not _quiet_scope(node):
                return None
            continue
        if node.name in METADATA_OPS:
            continue
        if node.name in SCALE_OPS and not softmaxes and scores(_arg(node, 0)) and not _arg(node, 1):
            scaled += 1
        elif node.name in BIAS_OPS and not softmaxes and scores(_arg(node, 0)) and _arg(node, 1):
            extras.append(_arg(node, 1))
        elif node.name == "aten::add" and not softmaxes and scores(_arg(node, 1)) and _arg(node, 0):
            extras.append(_arg(node, 0))  # bias + scores
        elif (node.name == "aten::where" and not softmaxes and _arg(node, 0)
              and (scores(_arg(node, 1)) or scores(_arg(node, 2)))):
            extras.append(_arg(node, 0))  # where(mask, scores, fill) or where(mask, fill, scores)
        elif node.name in SOFTMAX_OPS and scores(_arg(node, 0)) and _concrete(node, 1) in (-1, len(_arg(node, 0)) - 1):
            softmaxes += 1
        elif node.name in PRODUCT_OPS and scores(_arg(node, 0)) and values(_arg(node, 1)):
            if softmaxes != 1 or scaled > 1 or not extras:
                return None
            B, H = heads or (1, rows)
            per_query = int(any(len(e) >= 2 and e[-2] > 1 for e in extras))
            inst = Instance("attention_masked", _dtype(first, 1 if first.name == "aten::baddbmm" else 0, default_dtype),
                            [(make_shape("attention_masked", B, H, H, S, D, 1, per_query), 1)],
                            notes=(f"attention written out: scores, {len(extras)} added or filled "
                                   f"({', '.join('x'.join(map(str, e)) for e in extras)}), softmax, @ v",))
            return nodes, inst
        elif not softmaxes and aside(node):
            continue
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
