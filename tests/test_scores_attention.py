"""Attention written out in a forward or a method it calls (MPT's, BLOOM's, GPT-Neo's,
DeBERTa-v2's, the old GPT-J's): the profiler plans it as one attention_masked problem (``recognize_scores``) and
apply rewrites the forward to call the op (``integrate.scores_attention``), or leaves a forward
alone whose scores go through anything but additions and fills with the dtype's lowest value."""
from __future__ import annotations

import types

import pytest
import torch
import torch.nn as nn

from autokernel.integrate.scores_attention import helpers, rewritten_forward
from autokernel.problems import get_problem


class Written(nn.Module):
    """MPT's attention core, with a bias and a bool mask (True: hidden)."""

    def __init__(self, heads=2, dim=16):
        super().__init__()
        self.heads, self.head_dim, self.softmax_scale = heads, dim // heads, 0.3
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        if bias is not None:
            scores = scores + bias
        if mask is not None:
            scores = scores.masked_fill(mask, torch.finfo(q.dtype).min)
        weights = nn.functional.softmax(scores.float(), dim=-1).to(v.dtype)
        weights = nn.functional.dropout(weights, p=0.1, training=self.training)
        out = torch.matmul(weights, v)
        return out, weights


class FilledWithZero(Written):
    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        scores = scores.masked_fill(mask, 0.0)
        weights = nn.functional.softmax(scores.float(), dim=-1).to(v.dtype)
        return torch.matmul(weights, v), weights


class Capped(Written):
    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        scores = scores + bias
        scores = torch.tanh(scores / 5.0) * 5.0
        weights = nn.functional.softmax(scores.float(), dim=-1).to(v.dtype)
        return torch.matmul(weights, v), weights


def _kernel_op(calls: list):
    reference = get_problem("attention_masked").reference

    def op(q, k, v, mask, scale):
        calls.append(tuple(mask.shape))
        return reference(q, k, v, mask, scale)

    problem = types.SimpleNamespace(shapes=[{"D": 8}])
    return types.SimpleNamespace(op=op, dtype=torch.float32, problem=problem, dims=lambda d: {8} if d == "D" else set(),
                                 head_dims=lambda: {(8, 8)})


def _inputs(s=6):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, s, 16, generator=gen)
    bias = torch.randn(2, 1, s, generator=gen)
    causal = torch.ones(s, s, dtype=torch.bool).triu(1)[None, None].expand(2, 1, s, s)
    return x, bias, causal


def test_the_written_out_attention_goes_to_the_op_and_matches():
    calls: list = []
    forward = rewritten_forward(Written.forward, helpers(_kernel_op(calls)))
    assert forward is not None
    m = Written().eval()
    x, bias, causal = _inputs()
    with torch.no_grad():
        ref_out, ref_weights = m(x, bias, causal)
        out, weights = forward(m, x, bias, causal)
        assert calls == [(2, 2, 6, 6)] and weights is None
        assert torch.allclose(out, ref_out, atol=1e-6)
        # no mask: the bias alone, one row for every query
        out, _ = forward(m, x, bias, None)
        assert calls[-1] == (1, 2, 1, 6) and torch.allclose(out, m(x, bias, None)[0], atol=1e-6)
        # training (dropout): the module's own code, weights and all
        m.train()
        torch.manual_seed(1)
        out, weights = forward(m, x, bias, causal)
        torch.manual_seed(1)
        ref_out, ref_weights = m(x, bias, causal)
    assert len(calls) == 2 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)


def test_a_call_the_kernel_was_not_judged_on_runs_the_original():
    calls: list = []
    forward = rewritten_forward(Written.forward, helpers(_kernel_op(calls)))
    m = Written().eval().double()
    x, bias, causal = _inputs()
    with torch.no_grad():
        out, weights = forward(m, x.double(), bias.double(), causal)
        ref_out, ref_weights = m(x.double(), bias.double(), causal)
    assert calls == [] and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)


class ScoresReturned(Written):
    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        scores = scores + bias
        weights = nn.functional.softmax(scores.float(), dim=-1).to(v.dtype)
        out = torch.matmul(weights, v)
        return out, scores


class WeightsUsed(Written):
    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        scores = scores + bias
        weights = nn.functional.softmax(scores.float(), dim=-1).to(v.dtype)
        out = torch.matmul(weights, v)
        return out + weights.mean()


def test_scores_changed_otherwise_than_added_to_or_filled_lowest_are_left_alone():
    names = helpers(_kernel_op([]))
    assert rewritten_forward(FilledWithZero.forward, names) is None
    assert rewritten_forward(Capped.forward, names) is None


def test_scores_or_weights_read_after_the_attention_leave_it_alone():
    """The fast path leaves the mask in the scores' name and None in the weights'."""
    names = helpers(_kernel_op([]))
    assert rewritten_forward(ScoresReturned.forward, names) is None
    assert rewritten_forward(WeightsUsed.forward, names) is None


class BiasFirst(Written):
    """The bias added on the left, the scale on the left, ``@``, transpose(-2, -1)."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = self.softmax_scale * (q @ k.transpose(-2, -1))
        scores = bias + scores
        scores = scores.masked_fill(mask, torch.finfo(q.dtype).min)
        weights = torch.softmax(scores.float(), -1).to(v.dtype)
        out = torch.matmul(weights, v)
        return out, weights


def test_other_spellings_are_rewritten_too():
    calls: list = []
    forward = rewritten_forward(BiasFirst.forward, helpers(_kernel_op(calls)))
    m = BiasFirst().eval()
    x, bias, causal = _inputs()
    with torch.no_grad():
        out, weights = forward(m, x, bias, causal)
        assert calls == [(2, 2, 6, 6)] and weights is None
        assert torch.allclose(out, m(x, bias, causal)[0], atol=1e-6)


@pytest.mark.parametrize("cls", [Written, BiasFirst])
def test_the_profiler_plans_it_as_one_attention_masked_problem(cls):
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = cls()

        def forward(self, x):
            s = x.shape[1]
            bias = torch.arange(s, dtype=x.dtype)[None, None] * 0.1
            causal = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)[None, None]
            return self.attn(x, bias.expand(2, 1, s), causal)[0]

    model = Wrapper().eval()
    loaded = LoadedModel(model, lambda seed: (torch.randn(2, 32, 16),), "toy", "written-out attention", [2, 32])
    plan = profile_model(loaded, warmup=0, iters=1)
    (att,) = [p for p in plan.problems if p.kind == "attention_masked"]
    assert att.shapes == [{"B": 2, "H": 2, "Hkv": 2, "S": 32, "D": 8, "additive": 1, "per_query": 1}]
    assert att.modules == ["attn"] and att.supported
    assert not [u for u in plan.not_covered if u.name.startswith(("aten::masked_fill", "aten::softmax", "aten::add"))]


def test_under_torch_compile_with_the_op_handed_over_the_original_statements_run():
    """compile_policy's ``eager``: inductor is to see the model's own arithmetic, so the forward
    runs its original statements while torch.compile traces (``traced_as_original``)."""
    from autokernel.integrate.ops import TRACED_UNDER_COMPILE

    calls: list = []
    k = _kernel_op(calls)
    k.op.opname = "toy_scores_attention"
    forward = rewritten_forward(Written.forward, helpers(k))
    cls = type("RewrittenWritten", (Written,), {"forward": forward})
    m = Written().eval()
    patched = Written().eval()
    patched.load_state_dict(m.state_dict())
    patched.__class__ = cls
    x, bias, causal = _inputs()
    TRACED_UNDER_COMPILE[k.op.opname] = lambda *args: None
    try:
        torch._dynamo.reset()
        with torch.no_grad():
            out, weights = torch.compile(patched, backend="eager")(x, bias, causal)
            ref_out, ref_weights = m(x, bias, causal)
    finally:
        TRACED_UNDER_COMPILE.pop(k.op.opname)
    assert calls == [] and weights is not None
    assert torch.allclose(out, ref_out, atol=1e-6) and torch.allclose(weights, ref_weights, atol=1e-6)


# ------------------------------------------------------------------ BLOOM: alibi.baddbmm, a view, bmm
def _bloom_config(**over):
    transformers = pytest.importorskip("transformers")
    cfg = dict(hidden_size=16, n_layer=2, n_head=2, vocab_size=64, attention_dropout=0.1)
    cfg.update(over)
    return transformers.BloomConfig(**cfg)


def _bloom_inputs(s=6, heads=2):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    gen = torch.Generator().manual_seed(0)
    x, residual = torch.randn(2, s, 16, generator=gen), torch.randn(2, s, 16, generator=gen)
    padding = torch.ones(2, s, dtype=torch.long)
    padding[1, 0] = 0  # a left-padded row: the alibi differs per batch row
    alibi = build_alibi_tensor(padding, heads, torch.float32)  # [B*H, 1, S]
    hidden = torch.ones(s, s, dtype=torch.bool).triu(1)
    causal = torch.zeros(2, 1, s, s).masked_fill(hidden, torch.finfo(torch.float32).min)
    return x, residual, alibi, causal


def test_blooms_attention_goes_to_the_op_and_matches():
    """BLOOM's scores are ``alibi.baddbmm(batch1=q, batch2=k^T, beta=, alpha=)`` on [B*H, S, D],
    viewed to [B, H, S, S] before the causal mask is added, and the weights viewed back for
    ``torch.bmm``: the alibi and the mask make the additive mask, the op gets [B, H, S, D]."""
    from transformers.models.bloom.modeling_bloom import BloomAttention

    calls: list = []
    forward = rewritten_forward(BloomAttention.forward, helpers(_kernel_op(calls)))
    assert forward is not None
    m = BloomAttention(_bloom_config(), layer_idx=0).eval()
    x, residual, alibi, causal = _bloom_inputs()
    with torch.no_grad():
        ref_out, ref_weights = m(x, residual, alibi, causal)
        out, weights = forward(m, x, residual, alibi, causal)
        assert calls == [(2, 2, 6, 6)] and weights is None
        assert torch.allclose(out, ref_out, atol=1e-6)
        # no mask: the alibi alone, one row for every query (its expansion is not copied)
        out, _ = forward(m, x, residual, alibi, None)
        assert calls[-1] == (2, 2, 1, 6) and torch.allclose(out, m(x, residual, alibi, None)[0], atol=1e-6)
        # a beta other than 1 scales the alibi
        m.beta = 0.5
        out, _ = forward(m, x, residual, alibi, causal)
        assert torch.allclose(out, m(x, residual, alibi, causal)[0], atol=1e-6)
        m.beta = 1.0
        # training (dropout): the module's own code, weights and all
        m.train()
        torch.manual_seed(1)
        out, weights = forward(m, x, residual, alibi, causal)
        torch.manual_seed(1)
        ref_out, ref_weights = m(x, residual, alibi, causal)
    assert len(calls) == 3 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)
    # a call the kernel was not judged on (fp64): the original statements
    m = m.eval().double()
    with torch.no_grad():
        out, weights = forward(m, *(t.double() for t in (x, residual, alibi, causal)))
        ref_out, ref_weights = m(*(t.double() for t in (x, residual, alibi, causal)))
    assert len(calls) == 3 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)


def test_a_bloom_model_with_its_attention_rewritten_matches():
    """Every layer's BloomAttention switched to the rewritten forward: the logits of a small
    BLOOM (padding mask and all) match the model's own in eval mode."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import BloomAttention

    calls: list = []
    forward = rewritten_forward(BloomAttention.forward, helpers(_kernel_op(calls)))
    torch.manual_seed(0)
    model = transformers.BloomForCausalLM(_bloom_config()).eval()
    ids = torch.randint(0, 64, (2, 10))
    padding = torch.ones(2, 10, dtype=torch.long)
    padding[1, :3] = 0
    with torch.no_grad():
        ref = [model(ids).logits, model(ids, attention_mask=padding).logits]
        cls = type("RewrittenBloomAttention", (BloomAttention,), {"forward": forward})
        for layer in model.transformer.h:
            layer.self_attention.__class__ = cls
        got = [model(ids).logits, model(ids, attention_mask=padding).logits]
    assert len(calls) == 4
    for a, b in zip(got, ref):
        assert torch.allclose(a, b, atol=1e-5)


def test_the_profiler_plans_blooms_attention_as_one_attention_masked_problem():
    """The chain (baddbmm, view, add, softmax, dropout, view, bmm) is one attention_masked
    problem, placed (apply with the starter: tests/test_placement.py)."""
    pytest.importorskip("transformers")
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    loaded = load_model("hf:bloom", config_overrides="hidden_size=64,n_layer=2,n_head=4,vocab_size=256",
                        input_shape=[2, 32], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    (att,) = [p for p in plan.problems if p.kind == "attention_masked"]
    assert att.shapes == [{"B": 2, "H": 4, "Hkv": 4, "S": 32, "D": 16, "additive": 1, "per_query": 1}]
    assert att.modules == ["model.transformer.h.0.self_attention", "model.transformer.h.1.self_attention"]
    assert att.supported, att.note
    left = [u.name for u in plan.not_covered]
    chain = ("aten::softmax", "aten::baddbmm", "aten::bmm", "softmax", "matmul")
    assert not [n for n in left if n.startswith(chain)], left


class Folded(nn.Module):
    """Heads folded into the batch, spelled otherwise than BLOOM: ``torch.baddbmm`` with the bias
    positional, a bool mask filled, the scores viewed as rows (a view that merges the query
    dimension, which the bias broadcasts along), F.dropout, the weights reshaped back."""

    def __init__(self, heads=2, dim=16):
        super().__init__()
        self.heads, self.head_dim, self.scale = heads, dim // heads, 0.3
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2).reshape(b * self.heads, s, self.head_dim)
                   for t in self.qkv(x).chunk(3, dim=2))
        kt = k.transpose(1, 2)
        scores = torch.baddbmm(bias, q, kt, beta=1.0, alpha=self.scale)
        rows = scores.view(b * self.heads * s, s)
        if mask is not None:
            rows = rows.masked_fill(mask.reshape(-1, s), torch.finfo(q.dtype).min)
        weights = torch.softmax(rows.float(), -1).to(v.dtype)
        weights = nn.functional.dropout(weights, p=0.1, training=self.training)
        folded = weights.reshape(b * self.heads, s, s)
        out = torch.bmm(folded, v)
        return out, weights


class ViewedAsInts(Folded):
    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2).reshape(b * self.heads, s, self.head_dim)
                   for t in self.qkv(x).chunk(3, dim=2))
        kt = k.transpose(1, 2)
        scores = bias.baddbmm(q, kt, alpha=self.scale)
        scores = scores.view(torch.int32)
        weights = torch.softmax(scores.float(), -1).to(v.dtype)
        return torch.bmm(weights, v), weights


class ViewedUnfolded(Written):
    """A view of the scores where heads are not folded: the op's mask layout is q's, so no."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        scores = scores + bias
        flat = scores.view(b * self.heads, s, s)
        weights = torch.softmax(flat.float(), -1).to(v.dtype)
        return torch.matmul(weights.view(b, self.heads, s, s), v), None


def test_folded_heads_spelled_otherwise_go_to_the_op_and_match():
    calls: list = []
    forward = rewritten_forward(Folded.forward, helpers(_kernel_op(calls)))
    assert forward is not None
    m = Folded().eval()
    x, _, causal = _inputs()
    bias = torch.randn(4, 1, 6, generator=torch.Generator().manual_seed(3))  # [B*H, 1, S]
    causal = causal.expand(2, 2, 6, 6)
    with torch.no_grad():
        out, weights = forward(m, x, bias, causal)
        assert weights is None and calls == [(1, 4, 6, 6)]  # rows: B and H unknown, [1, B*H, S, S]
        assert torch.allclose(out, m(x, bias, causal)[0], atol=1e-6)
        out, _ = forward(m, x, bias, None)
        assert torch.allclose(out, m(x, bias, None)[0], atol=1e-6)
        m.train()
        torch.manual_seed(1)
        out, weights = forward(m, x, bias, causal)
        torch.manual_seed(1)
        ref_out, ref_weights = m(x, bias, causal)
    assert len(calls) == 2 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)


def test_scores_viewed_as_another_dtype_or_viewed_unfolded_are_left_alone():
    names = helpers(_kernel_op([]))
    assert rewritten_forward(ViewedAsInts.forward, names) is None
    assert rewritten_forward(ViewedUnfolded.forward, names) is None


# ------------------------------------------------------------------ GPT-Neo: the chain in a helper method
def _neo_config(**over):
    transformers = pytest.importorskip("transformers")
    cfg = dict(hidden_size=16, num_layers=2, num_heads=2, vocab_size=64, attention_dropout=0.1,
               attention_types=[[["global", "local"], 1]], window_size=4, max_position_embeddings=32)
    cfg.update(over)
    return transformers.GPTNeoConfig(**cfg)


def _padded_causal(b=2, s=6, dtype=torch.float32):
    """create_causal_mask's eager form: [B, 1, S, S], the dtype's lowest value where hidden; the
    second row left-padded by two."""
    keep = torch.ones(b, s, dtype=torch.bool)
    keep[1, :2] = False
    allowed = torch.ones(s, s, dtype=torch.bool).tril()[None, None] & keep[:, None, None, :]
    return torch.zeros(b, 1, s, s, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


def test_gpt_neos_attention_in_its_helper_method_goes_to_the_op_and_matches():
    """GPTNeoSelfAttention.forward calls self._attn, which writes the attention out: q and k cast
    to fp32, scores unscaled, torch.where(causal_mask, scores, mask_value) with mask_value the
    dtype's lowest (a tensor made of torch.finfo(scores.dtype).min), + attention_mask, softmax in
    the scores' dtype, .to(value.dtype), dropout, matmul with v.  The helper is rewritten (the
    forward has no chain of its own); the local layer's window is in its causal mask."""
    from transformers.models.gpt_neo.modeling_gpt_neo import GPTNeoSelfAttention

    from autokernel.integrate.scores_attention import rewritten_members

    calls: list = []
    members = rewritten_members(GPTNeoSelfAttention, helpers(_kernel_op(calls)))
    assert members is not None and set(members) == {"_attn"}
    for kind in ("global", "local"):
        m = GPTNeoSelfAttention(_neo_config(), kind, layer_id=0).eval()
        patched = GPTNeoSelfAttention(_neo_config(), kind, layer_id=0).eval()
        patched.load_state_dict(m.state_dict())
        patched.__class__ = type("RewrittenNeo", (GPTNeoSelfAttention,), members)
        x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
        mask = _padded_causal()
        calls.clear()
        with torch.no_grad():
            ref_out, ref_weights = m(x, attention_mask=mask)
            out, weights = patched(x, attention_mask=mask)
            assert calls == [(2, 1, 6, 6)] and weights is None
            assert torch.allclose(out, ref_out, atol=1e-6)
            out, _ = patched(x)  # no attention mask: the causal (window) mask alone
            assert calls[-1] == (1, 1, 6, 6) and torch.allclose(out, m(x)[0], atol=1e-6)
            # training (dropout): the module's own code, weights and all
            m.train(), patched.train()
            torch.manual_seed(1)
            out, weights = patched(x, attention_mask=mask)
            torch.manual_seed(1)
            ref_out, ref_weights = m(x, attention_mask=mask)
            assert len(calls) == 2 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)
            # a call the kernel was not judged on (fp64): the original statements
            m.eval().double(), patched.eval().double()
            out, weights = patched(x.double(), attention_mask=mask.double())
            ref_out, ref_weights = m(x.double(), attention_mask=mask.double())
        assert len(calls) == 2 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)


def test_a_gpt_neo_model_with_its_attention_rewritten_matches():
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt_neo.modeling_gpt_neo import GPTNeoSelfAttention

    from autokernel.integrate.scores_attention import rewritten_members

    calls: list = []
    members = rewritten_members(GPTNeoSelfAttention, helpers(_kernel_op(calls)))
    torch.manual_seed(0)
    model = transformers.GPTNeoForCausalLM(_neo_config()).eval()
    ids = torch.randint(0, 64, (2, 10))
    padding = torch.ones(2, 10, dtype=torch.long)
    padding[1, :3] = 0
    with torch.no_grad():
        ref = [model(ids).logits, model(ids, attention_mask=padding).logits]
        cls = type("RewrittenNeo", (GPTNeoSelfAttention,), members)
        for block in model.transformer.h:
            block.attn.attention.__class__ = cls
        got = [model(ids).logits, model(ids, attention_mask=padding).logits]
    assert len(calls) == 4
    for a, b in zip(got, ref):
        assert torch.allclose(a, b, atol=1e-5)


class WhereFilledWithZero(Written):
    """torch.where with a fill other than the dtype's lowest: not a mask."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2))
        fill = torch.tensor(0.0, dtype=scores.dtype)
        scores = torch.where(mask, scores, fill)
        weights = nn.functional.softmax(scores, dim=-1)
        out = torch.matmul(weights, v)
        return out, weights


class FilledWithAnotherDtypesLowest(Written):
    """fp16's lowest (-65504) on fp32 scores is not rounded away: a row hidden everywhere differs."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores.masked_fill(mask, torch.finfo(torch.float16).min)
        weights = nn.functional.softmax(scores, dim=-1)
        out = torch.matmul(weights, v)
        return out, weights


class FillReassigned(Written):
    """The fill's name is the lowest value, then something else by the time where reads it."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2))
        fill = torch.finfo(scores.dtype).min
        if bias is not None:
            fill = 0.0
        scores = torch.where(mask, scores, fill)
        weights = nn.functional.softmax(scores, dim=-1)
        out = torch.matmul(weights, v)
        return out, weights


class ScoresShapeRead(Written):
    """The scores' shape read before the softmax of a chain not viewed as heads folded: the op's
    path starts from one zero element, so this stays the module's own."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        scores = scores + bias[..., :scores.size(-1)]
        weights = nn.functional.softmax(scores, dim=-1)
        out = torch.matmul(weights, v)
        return out, weights


def test_where_and_fills_it_cannot_prove_lowest_are_left_alone():
    names = helpers(_kernel_op([]))
    assert rewritten_forward(WhereFilledWithZero.forward, names) is None
    assert rewritten_forward(FilledWithAnotherDtypesLowest.forward, names) is None
    assert rewritten_forward(FillReassigned.forward, names) is None


def test_the_scores_shape_read_before_the_softmax_starts_them_full():
    """``scores.size(-1)`` between the scores and the softmax: the op's path starts from zeros of
    the scores' full shape (expanded, not copied), so the read gives what it gives the module."""
    calls: list = []
    forward = rewritten_forward(ScoresShapeRead.forward, helpers(_kernel_op(calls)))
    assert forward is not None
    m = ScoresShapeRead().eval()
    x, bias, _ = _inputs()
    with torch.no_grad():
        out, weights = forward(m, x, bias)
        assert calls == [(2, 2, 6, 6)] and weights is None  # the bias added to the full zeros
        assert torch.allclose(out, m(x, bias)[0], atol=1e-6)


def test_the_profiler_plans_gpt_neos_attention_as_one_attention_masked_problem():
    pytest.importorskip("transformers")
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    cfg = dict(hidden_size=64, num_layers=2, num_heads=4, vocab_size=256, attention_types=[[["global", "local"], 1]],
               window_size=16)
    loaded = load_model("hf:gpt_neo", config_overrides=cfg, input_shape=[2, 32], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    (att,) = [p for p in plan.problems if p.kind == "attention_masked"]
    assert att.shapes == [{"B": 2, "H": 4, "Hkv": 4, "S": 32, "D": 16, "additive": 1, "per_query": 1}]
    assert att.modules == ["model.transformer.h.0.attn.attention", "model.transformer.h.1.attn.attention"]
    assert att.supported, att.note
    left = [u.name for u in plan.not_covered]
    chain = ("aten::softmax", "aten::matmul", "softmax", "matmul")  # the mask's own where and add run outside
    assert not [n for n in left if n.startswith(chain)], left


# ------------------------------------------------------------------ DeBERTa-v2: the keys scaled, bmm, masked_fill
def _deberta_config(**over):
    transformers = pytest.importorskip("transformers")
    cfg = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, vocab_size=64,
               attention_probs_dropout_prob=0.1, max_position_embeddings=32)
    cfg.update(over)
    return transformers.DebertaV2Config(**cfg)


def test_debertas_attention_goes_to_the_op_and_matches():
    """DisentangledSelfAttention (relative attention off): torch.bmm(q, k^T / scale.to(q.dtype))
    on heads folded into the batch, the scale a 0-d tensor (sqrt(D)), the scores viewed as [B, H,
    S, S] by their own sizes, masked_fill(~mask, finfo(q.dtype).min), softmax in the scores'
    dtype, dropout, torch.bmm of the weights viewed back with v."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

    calls: list = []
    forward = rewritten_forward(DisentangledSelfAttention.forward, helpers(_kernel_op(calls)))
    assert forward is not None
    m = DisentangledSelfAttention(_deberta_config()).eval()
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    keep = torch.ones(2, 6)
    keep[1, 4:] = 0  # a right-padded row: its padded queries see nothing (a uniform row)
    mask = (keep[:, None, :, None] * keep[:, None, None, :])  # get_attention_mask's [B, 1, S, S]
    with torch.no_grad():
        ref_out, _ = m(x, mask, output_attentions=True)
        out, weights = forward(m, x, mask, output_attentions=True)
        assert calls == [(2, 2, 6, 6)] and weights is None
        assert torch.allclose(out, ref_out, atol=1e-6)
        m.train()
        torch.manual_seed(1)
        out, weights = forward(m, x, mask, output_attentions=True)
        torch.manual_seed(1)
        ref_out, ref_weights = m(x, mask, output_attentions=True)
        assert len(calls) == 1 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)
        m.eval().double()
        out, _ = forward(m, x.double(), mask.double())
        assert len(calls) == 1 and torch.equal(out, m(x.double(), mask.double())[0])


def test_a_deberta_model_with_its_attention_rewritten_matches():
    transformers = pytest.importorskip("transformers")
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

    calls: list = []
    forward = rewritten_forward(DisentangledSelfAttention.forward, helpers(_kernel_op(calls)))
    torch.manual_seed(0)
    model = transformers.DebertaV2Model(_deberta_config()).eval()
    ids = torch.randint(0, 64, (2, 10))
    padding = torch.ones(2, 10, dtype=torch.long)
    padding[1, 7:] = 0
    with torch.no_grad():
        ref = [model(ids).last_hidden_state, model(ids, attention_mask=padding).last_hidden_state]
        cls = type("RewrittenDeberta", (DisentangledSelfAttention,), {"forward": forward})
        for layer in model.encoder.layer:
            layer.attention.self.__class__ = cls
        got = [model(ids).last_hidden_state, model(ids, attention_mask=padding).last_hidden_state]
    assert len(calls) == 4
    for a, b in zip(got, ref):
        assert torch.allclose(a, b, atol=1e-5)


def test_the_profiler_plans_debertas_attention_as_one_attention_masked_problem():
    """From the keys' scaling (a div before the bmm) to the bmm with v; with relative attention
    on (c2p, p2c: projections of the relative embeddings inside the chain) nothing is planned."""
    pytest.importorskip("transformers")
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    small = "hidden_size=64,num_hidden_layers=2,num_attention_heads=4,intermediate_size=128,vocab_size=256"
    loaded = load_model("hf:deberta-v2", config_overrides=small, input_shape=[2, 32], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    (att,) = [p for p in plan.problems if p.kind == "attention_masked"]
    assert att.shapes == [{"B": 2, "H": 4, "Hkv": 4, "S": 32, "D": 16, "additive": 1, "per_query": 1}]
    assert att.modules == [f"model.deberta.encoder.layer.{i}.attention.self" for i in range(2)]
    assert att.supported, att.note
    left = [u.name for u in plan.not_covered]
    chain = ("aten::softmax", "aten::masked_fill", "aten::bmm", "aten::div", "softmax", "matmul")
    assert not [n for n in left if n.startswith(chain)], left

    relative = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                    vocab_size=256, relative_attention=True, pos_att_type=["c2p", "p2c"])
    loaded = load_model("hf:deberta-v2", config_overrides=relative, input_shape=[2, 32], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    assert not [p for p in plan.problems if p.kind == "attention_masked"]


class ScaledQueryWhereFirst(Written):
    """The scale on q, the fill first in where (mask True: hidden), a float lowest by name, the
    softmax in the scores' dtype cast to v's by a statement of its own."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q * self.softmax_scale, k.transpose(-2, -1))
        low = torch.finfo(q.dtype).min
        scores = torch.where(mask, low, scores)
        scores = scores + bias
        weights = torch.softmax(scores, dim=-1)
        weights = weights.to(v.dtype)
        out = weights @ v
        return out, weights


class DividedProduct(Written):
    """The product divided by a one-element tensor."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        root = torch.tensor(float(self.head_dim)).sqrt()
        scores = torch.matmul(q, k.transpose(-1, -2)) / root
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)
        out = torch.matmul(weights, v)
        return out, weights


@pytest.mark.parametrize("cls", [ScaledQueryWhereFirst, DividedProduct])
def test_scales_on_q_or_divided_and_where_with_the_fill_first_go_to_the_op(cls):
    calls: list = []
    forward = rewritten_forward(cls.forward, helpers(_kernel_op(calls)))
    assert forward is not None
    m = cls().eval()
    x, bias, causal = _inputs()
    with torch.no_grad():
        out, weights = forward(m, x, bias, causal)
        assert len(calls) == 1 and weights is None
        assert torch.allclose(out, m(x, bias, causal)[0], atol=1e-6)


# ------------------------------------------------------------------ old GPT-J: the scale apart, a head mask
class JStyle(nn.Module):
    """Old GPT-J's attention, in a helper the forward calls: q and k made fp32, the product
    divided by a one-element buffer (sqrt(D)) in a statement of its own, the additive mask sliced
    to the keys under an if, softmax in fp32, cast to v's dtype, a Dropout module, the weights
    times a head mask under an if, @ v; no causal where (the causal part is in the mask)."""

    def __init__(self, heads=2, dim=16):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        root = torch.tensor(float(self.head_dim)).sqrt()
        self.register_buffer("root_d", root, persistent=False)
        self.weights_dropout = nn.Dropout(0.1)

    def _attend(self, q, k, v, mask=None, heads_kept=None):
        q = q.to(torch.float32)
        k = k.to(torch.float32)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / self.root_d
        if mask is not None:
            cut = mask[:, :, :, : k.shape[-2]]
            w = w + cut
        w = nn.functional.softmax(w, dim=-1)
        w = w.to(v.dtype)
        w = self.weights_dropout(w)
        if heads_kept is not None:
            w = w * heads_kept
        out = torch.matmul(w, v)
        return out, w

    def forward(self, x, mask=None, heads_kept=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        out, w = self._attend(q, k, v, mask, heads_kept)
        return out.transpose(1, 2).reshape(b, s, -1), w


def _j_pair(calls):
    from autokernel.integrate.scores_attention import rewritten_members

    members = rewritten_members(JStyle, helpers(_kernel_op(calls)))
    assert members is not None and set(members) == {"_attend"}
    m = JStyle().eval()
    patched = JStyle().eval()
    patched.load_state_dict(m.state_dict())
    patched.__class__ = type("RewrittenJ", (JStyle,), members)
    return m, patched


def test_gpt_j_style_attention_goes_to_the_op_and_matches():
    calls: list = []
    m, patched = _j_pair(calls)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    mask = torch.cat([_padded_causal(), torch.zeros(2, 1, 6, 2)], dim=-1)  # wider than the keys: sliced
    with torch.no_grad():
        ref_out, ref_weights = m(x, mask)
        out, weights = patched(x, mask)
        assert calls == [(2, 1, 6, 6)] and weights is None
        assert torch.allclose(out, ref_out, atol=1e-6)
        # no mask: zero scores start one element, which the op does not take: PyTorch's product
        out, weights = patched(x)
        assert len(calls) == 1 and weights is None and torch.allclose(out, m(x)[0], atol=1e-6)
        # a head mask given: the module's own statements, weights and all
        kept = torch.tensor([1.0, 0.0])[None, :, None, None]
        out, weights = patched(x, mask, kept)
        ref_out, ref_weights = m(x, mask, kept)
        assert len(calls) == 1 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)
        # training (dropout): the module's own code
        m.train(), patched.train()
        torch.manual_seed(1)
        out, weights = patched(x, mask)
        torch.manual_seed(1)
        ref_out, ref_weights = m(x, mask)
        assert len(calls) == 1 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)
        # a call the kernel was not judged on (fp64): the original statements
        m.eval().double(), patched.eval().double()
        out, weights = patched(x.double(), mask.double())
        ref_out, ref_weights = m(x.double(), mask.double())
    assert len(calls) == 1 and torch.equal(out, ref_out) and torch.equal(weights, ref_weights)


class ScaledTwice(Written):
    """A scale on the product and a second one in a statement of its own: not the op's one scale."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        scores = scores / self.softmax_scale
        scores = scores + bias
        weights = torch.softmax(scores, dim=-1)
        out = torch.matmul(weights, v)
        return out, weights


class ScaledAfterTheMask(Written):
    """The scale after the mask is added scales the mask too (CodeGen's, transformers 5.17): the
    op gets the scale and the statements between, the scaling among them, run on zero scores."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores + bias
        scores = scores * self.softmax_scale
        weights = torch.softmax(scores, dim=-1)
        out = torch.matmul(weights, v)
        return out, weights


class HeadMaskMadeInside(Written):
    """The head mask's name assigned inside the chain: its value where the op's path is chosen is
    not the one the multiply reads."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        kept = None
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        if mask is not None:
            kept = bias[:, :, :1, None]
            scores = scores + bias
        weights = torch.softmax(scores, dim=-1)
        if kept is not None:
            weights = weights * kept
        out = torch.matmul(weights, v)
        return out, weights


class HeadMaskedOtherwise(Written):
    """Weights changed under the if by more than a multiply by the tested name."""

    def forward(self, x, bias, mask=None):
        b, s = x.shape[:2]
        q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights * bias
        out = torch.matmul(weights, v)
        return out, weights


def test_a_scale_after_the_mask_goes_to_the_op_with_the_mask_scaled():
    test_scales_on_q_or_divided_and_where_with_the_fill_first_go_to_the_op(ScaledAfterTheMask)


def test_a_second_scale_or_head_masks_it_cannot_check_first_are_left_alone():
    names = helpers(_kernel_op([]))
    for cls in (ScaledTwice, HeadMaskMadeInside, HeadMaskedOtherwise):
        assert rewritten_forward(cls.forward, names) is None, cls.__name__


def test_a_one_element_tensor_off_the_cpu_is_read_once_per_version():
    """``read_once`` (GPT-J's scale buffer on the GPU: each read waits for the device)."""
    from autokernel.integrate import scores_attention

    root = torch.tensor(2.0)
    assert scores_attention.read_once(root) == 2.0
    key = id(root)
    assert scores_attention._READ[key][2] == 2.0
    scores_attention._READ[key] = (scores_attention._READ[key][0], root._version, 5.0)  # a cached value...
    assert scores_attention.read_once(root) == 5.0  # ...is what a later call gets, unread
    root.fill_(4.0)  # changed in place: read again
    assert scores_attention.read_once(root) == 4.0
    del root
    assert key not in scores_attention._READ
    with torch.inference_mode():
        assert scores_attention.read_once(torch.tensor(2.0)) is None  # no version counter


def test_the_profiler_plans_gpt_j_style_attention_as_one_attention_masked_problem():
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = JStyle()

        def forward(self, x):
            s = x.shape[1]
            causal = torch.zeros(s, s, dtype=x.dtype).masked_fill(
                torch.ones(s, s, dtype=torch.bool).triu(1), torch.finfo(x.dtype).min)
            return self.attn(x, causal[None, None].expand(x.shape[0], 1, s, s))[0]

    model = Wrapper().eval()
    loaded = LoadedModel(model, lambda seed: (torch.randn(2, 32, 16),), "toy", "GPT-J-style attention", [2, 32])
    plan = profile_model(loaded, warmup=0, iters=1)
    (att,) = [p for p in plan.problems if p.kind == "attention_masked"]
    assert att.shapes == [{"B": 2, "H": 2, "Hkv": 2, "S": 32, "D": 8, "additive": 1, "per_query": 1}]
    assert att.modules == ["attn"] and att.supported, att.note
    left = [u.name for u in plan.not_covered]
    chain = ("aten::softmax", "aten::matmul", "aten::div", "aten::add", "softmax", "matmul")
    assert not [n for n in left if n.startswith(chain)], left
