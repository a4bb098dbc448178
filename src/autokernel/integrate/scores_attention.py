"""Applier for ``attention_masked`` on attention written out in a forward: MPT's ``MptAttention``
(scores, + the ALiBi bias, ``masked_fill`` with the causal mask, fp32 softmax, dropout, ``@ v``),
BLOOM's ``BloomAttention`` (``alibi.baddbmm(q, k^T)``, the scores viewed as [B, H, S, S], + the
causal mask, fp32 softmax, dropout, the weights viewed back, ``torch.bmm`` with v), GPT-Neo's
``GPTNeoSelfAttention._attn`` (a method its forward calls: fp32 scores unscaled, ``torch.where``
with the causal or window mask and the lowest value, + the mask, softmax, cast to v's dtype,
dropout, ``@ v``), DeBERTa-v2's ``DisentangledSelfAttention`` (``torch.bmm(q, k^T / scale)``
on heads folded into the batch, the scores viewed as [B, H, S, S] by their own sizes,
``masked_fill``, softmax, dropout, ``torch.bmm`` of the weights viewed back with v) and GPT-J's
``GPTJAttention._attn`` as transformers up to about 5.17 wrote it (fp32 q and k, the product
divided by ``self.scale_attn`` in a statement of its own, a one-element buffer that goes where
the model goes, + the attention mask sliced to the keys under an ``if``, softmax, cast to v's
dtype, dropout, ``if head_mask is not None: w = w * head_mask``, ``@ v``), and CodeGen's ``_attn``
of the same versions (the mask added before the division by the scale, ``nn.Softmax(dim=-1)``).

``scores_statements`` finds the statements (the scores, what adds to, fills or views them before
the softmax, the softmax, dropout, the product with v).  Each of the statements between the
scores and the softmax adds a tensor that does not depend on the scores, replaces some of them by
the dtype's lowest value, or views them, so running them on zero scores (on BLOOM's bias, what
baddbmm adds the product to) gives the additive mask the op takes, in the layout the forward
gives the scores: ``s + mask`` is what they make of ``s`` (the filled places differ by ``s``
against a value of -3.4e38, which rounds it away in fp32; softmax gives them zero weight either
way, and a row filled everywhere is uniform either way).  The rewritten forward decides once per
call (``ready``): in eval mode, outside autocast, on a call the op's kernel was judged on (dtype,
head dim, as many keys as queries), with every head mask None, with a number for the scale (or
a one-element tensor: DeBERTa-v2's sqrt(D) on the CPU, read each call; GPT-J's buffer on the
GPU, read once per version of it, ``read_once``; ``1 / scale`` where the forward divides) and
the op not handed back to PyTorch under torch.compile, the scores start as zeros (one element,
or expanded to the scores' shape without a copy where the statements in between read it; or the
bias, times beta, expanded likewise), the statements in between run as written (their checks and
slicing included; views of the scores as reshapes, which give the same values and take an
expanded tensor; a statement of its own that scales them is left out, the op takes the scale),
and the output is the op's, the weights None (the attention weights are not computed:
transformers' SDPA path returns None for them too); otherwise every statement runs as written.
Training (dropout) always runs the original code.  Where heads are folded into the batch (q, k, v [B*H, S, D]), the
op gets them as [B, H, S, D], B and H those of the mask where the forward viewed the scores so.
Where the forward casts the weights to v's dtype (GPT-Neo computes the scores in fp32 whatever
the model's dtype), v goes to the op in q's dtype and the output back to v's.  Where the
forward has no such chain, the methods it calls on ``self`` are searched (``rewritten_members``).
"""
from __future__ import annotations

import ast
import copy
import inspect
import types
import weakref
from typing import Any, Callable

import torch
import torch.nn as nn

from .calls import _sdpa_ok, kernel_mask
from .ops import traced_as_original
from .patching import apply_rewritten_members, rewrap
from .rewrite import compile_forward, parse_forward, reached_methods, statement_lists
from .scores_statements import Chain, find_chain, uses
from .selection import KernelOp

READY, START, ATTEND = "_autokernel_scores_ready", "_autokernel_scores_start", "_autokernel_scores_attention"
SCALAR = "_autokernel_scores_scalar"
FLAG, SCALE = "_autokernel_scores_fast", "_autokernel_scores_scale"


# ------------------------------------------------------------------ the helpers the forward calls
def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


_READ: dict[int, tuple[Any, int, float]] = {}  # id -> (a weak reference to it, its version, its value)


def read_once(x: torch.Tensor) -> float | None:
    """The value of a one-element tensor on a device (GPT-J's ``scale_attn``, a buffer that goes
    where the model goes), read once per version of it: the read waits for the device, so later
    calls reuse it until the tensor is changed in place (its version counter moves).  None where
    it cannot be read so: an inference tensor (no version counter), or unread while a CUDA graph
    is being captured (a read there is an error; the original statements run)."""
    if x.is_inference():
        return None
    key, version = id(x), x._version
    got = _READ.get(key)
    if got is not None and got[0]() is x and got[1] == version:
        return got[2]
    if x.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return None
    value = float(x)
    _READ[key] = (weakref.ref(x, lambda _, key=key: _READ.pop(key, None)), version, value)
    return value


def scalar(x: Any, divide: bool) -> float | None:
    """The scale as a number (``1 / x`` where the forward divides by it): ``x`` a number or a
    one-element floating tensor: on the CPU (DeBERTa-v2's ``sqrt(D)``, made there: reading it
    waits for no device) read each call, on a device read once per version (``read_once``);
    None otherwise, and under torch.compile's tracing, where the original statements run."""
    if isinstance(x, torch.Tensor):
        if (x.numel() != 1 or not x.is_floating_point() or x.device.type == "meta"
                or torch.compiler.is_compiling()):
            return None
        x = float(x) if x.device.type == "cpu" else read_once(x)
        if x is None:
            return None
    if not _number(x) or (divide and x == 0):
        return None
    return 1.0 / x if divide else x


def helpers(k: KernelOp) -> dict[str, Callable[..., Any]]:
    op, dtype, head_dims = k.op, k.dtype, k.head_dims()

    def ready(module, q, key, v, scale, dims, to_v=False) -> bool:
        """``dims``: 4, or 3 where heads are folded into the batch; ``to_v``: the forward casts the
        weights to v's dtype, so v may be in a narrower floating dtype than q and k (the op gets
        it in theirs, its output goes back to v's)."""
        if getattr(module, "training", True) or not _number(scale):
            return False
        if not all(isinstance(t, torch.Tensor) and t.dim() == dims for t in (q, key, v)):
            return False
        if torch.is_autocast_enabled(q.device.type):
            return False  # the scores' dtype is autocast's, not q's
        if (to_v and v.dtype != q.dtype and v.is_floating_point() and q.is_floating_point()
                and torch.finfo(v.dtype).bits < torch.finfo(q.dtype).bits):
            # v narrower than q (bf16 against fp32): the op is at least as exact as the forward's
            # product in v's dtype; a wider v (fp64) runs the forward's own statements
            v = torch.empty(v.shape, dtype=q.dtype, device="meta")  # only its dtype and shape are read
        if dims == 3:
            q, key, v = q[None], key[None], v[None]
        return _sdpa_ok(q, key, v, dtype, head_dims, False) and not traced_as_original(op)

    def start(q, key, bias, beta, full=False):
        """The scores the statements before the softmax start from: zero (one element, as it
        broadcasts; zeros of the scores' shape, expanded, where those statements read it), or
        ``beta * bias`` expanded to [N, S, S] as baddbmm's product is (not copied)."""
        shape = (*q.shape[:-1], key.shape[-2])
        if bias is None:
            zero = torch.zeros((1,) * q.dim(), dtype=q.dtype, device=q.device)
            return zero.expand(shape) if full else zero
        if _number(beta) and beta == 0:  # baddbmm ignores its input then
            return torch.zeros((), dtype=q.dtype, device=q.device).expand(shape)
        return (bias if _number(beta) and beta == 1 else bias * beta).expand(shape)

    def attend4(q, key, v, mask, scale):
        m = kernel_mask(mask, q, key)
        if m is not None:
            return op(q, key, v, m, float(scale))
        scores = torch.matmul(q, key.transpose(-1, -2)) * scale + mask
        return torch.matmul(torch.softmax(scores.float(), dim=-1).to(v.dtype), v)

    def attend(q, key, v, mask, scale):
        if v.dtype != q.dtype:  # (ready: the forward casts the weights to v's dtype)
            return attend(q, key, v.to(q.dtype), mask, scale).to(v.dtype)
        if q.dim() == 4:
            return attend4(q, key, v, mask, scale)
        # heads folded into the batch ([N, S, D]): as [B, H, S, D] where the forward viewed the
        # scores as [B, H, S, S] (B * H = N), else as [1, N, S, D]; the output [N, S, D], as bmm's
        n, sq, sk = q.shape[0], q.shape[1], key.shape[1]
        if mask.dim() == 4 and mask.shape[0] * mask.shape[1] == n and tuple(mask.shape[2:]) == (sq, sk):
            lead = tuple(mask.shape[:2])
        else:
            lead = (1, n)
            if mask.numel() == n * sq * sk:
                mask = mask.reshape(1, n, sq, sk)  # the scores' layout, whatever views it went through
        q, key, v4 = (t.reshape(*lead, *t.shape[1:]) for t in (q, key, v))
        return attend4(q, key, v4, mask, scale).reshape(n, sq, v.shape[-1])

    return {READY: ready, START: start, ATTEND: attend, SCALAR: scalar}


# ------------------------------------------------------------------ the rewrite
def _load(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=_load(name), args=list(args), keywords=[])


def _assign(name: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value)


def _keys(chain: Chain) -> ast.expr:
    """The keys as [..., S, D]: ``KT.transpose(-1, -2)`` where the forward has them transposed."""
    if not chain.kt:
        return _load(chain.k)
    minus = [ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=v)) for v in (1, 2)]
    return ast.Call(func=ast.Attribute(value=_load(chain.k), attr="transpose", ctx=ast.Load()), args=minus, keywords=[])


class _ViewsAsReshapes(ast.NodeTransformer):
    """``n.view(...)`` as ``n.reshape(...)`` for the scores' names ``n``: the same values, and a
    reshape takes the expanded bias the op's path starts from."""

    def __init__(self, names: list[str]):
        self.names = set(names)

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        if (isinstance(node.func, ast.Attribute) and node.func.attr == "view"
                and isinstance(node.func.value, ast.Name) and node.func.value.id in self.names):
            node.func.attr = "reshape"
        return node


def _rewrite_body(body: list[ast.stmt], fdef: ast.FunctionDef) -> int:
    """Rewrite the first written-out attention in ``body`` (in place); 1 if there was one."""
    chain = find_chain(body, fdef)
    if chain is None:
        return 0
    q, v, none = (lambda: _load(chain.q)), (lambda: _load(chain.v)), (lambda: ast.Constant(value=None))
    bias, beta = (copy.deepcopy(e) if e is not None else none() for e in (chain.bias, chain.beta))
    views = _ViewsAsReshapes(chain.scores)
    fast = [_assign(chain.scores[0], _call(START, q(), _keys(chain), bias, beta, ast.Constant(value=chain.full))),
            *[views.visit(copy.deepcopy(stmt)) for stmt in body[chain.first + 1 + chain.scale_after:chain.softmax]],  # (a last scaling too: mask / C)
            _assign(chain.out, _call(ATTEND, q(), _keys(chain), v(), _load(chain.read), _load(SCALE))),
            *[_assign(w, none()) for w in dict.fromkeys(chain.weights)]]
    ready = _call(READY, _load(fdef.args.args[0].arg), q(), _keys(chain), v(), _load(SCALE),
                  ast.Constant(value=3 if chain.folded else 4), ast.Constant(value=chain.to_v))
    if chain.unless:  # head masks: the op's path only where each is None (checked first)
        nones = [ast.Compare(left=_load(n), ops=[ast.Is()], comparators=[none()]) for n in chain.unless]
        ready = ast.BoolOp(op=ast.And(), values=[*nones, ready])
    first = body[chain.first]
    scale = _call(SCALAR, copy.deepcopy(chain.scale), ast.Constant(value=chain.divide))
    new = [_assign(SCALE, scale), _assign(FLAG, ready),
           ast.If(test=_load(FLAG), body=fast, orelse=body[chain.first:chain.last + 1])]
    body[chain.first:chain.last + 1] = [ast.copy_location(n, first) for n in new]
    return 1


def rewritten_forward(forward: Any, names: dict[str, Callable[..., Any]]) -> Any | None:
    """``forward`` with its written-out attention going to the op; None where it has none (or no source)."""
    inner = inspect.unwrap(forward)
    parsed = parse_forward(inner) if isinstance(inner, types.FunctionType) else None
    if parsed is None:
        return None
    tree, fdef = parsed
    if any(uses(fdef, name) for name in (FLAG, SCALE, READY, START, ATTEND, SCALAR)):
        return None  # rewritten before
    found = sum(_rewrite_body(body, fdef) for body in list(statement_lists(fdef)))
    if not found:
        return None
    return rewrap(forward, compile_forward(inner, tree, names))


def rewritten_members(cls: type, names: dict[str, Callable[..., Any]]) -> dict[str, Any] | None:
    """``{"forward": ...}`` with ``cls.forward``'s written-out attention going to the op, or, where
    the forward has none, the methods it reaches through ``self`` that do (GPT-Neo's ``_attn``;
    ``rewrite.reached_methods``) by their names; None where none has one."""
    forward = rewritten_forward(cls.forward, names)
    if forward is not None:
        return {"forward": forward}
    out = {}
    for name, method, *_ in reached_methods(cls, set(), (nn.Module, object)):
        new = rewritten_forward(method, names) if name != "forward" else None
        if new is not None:
            out[name] = new
    return out or None


def _apply_scores_attention(model, k: KernelOp, done, replaced, skipped, probed) -> None:
    apply_rewritten_members(model, k, "attention_masked", "scores attention", helpers, rewritten_members, probed,
                            replaced)
