"""apply() with the fused kinds (CPU, Triton interpreter): a residual add inside the norm, GELU
(module and F.gelu), GEGLU and packed SwiGLU MLPs, BERT-style post-norm output blocks; the
patched model under torch.compile (fullgraph); and the CUDA-graph mode's refusal off a GPU."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.cli import app  # noqa: E402
from autokernel.integrate import OP_CALLS, IntegrateError, apply  # noqa: E402
from autokernel.plan import PlanProblem  # noqa: E402

from test_integrate import make_workdir, rel  # noqa: E402


class GeluTanh(nn.Module):
    def forward(self, x):
        return nn.functional.gelu(x, approximate="tanh")


class GemmaLikeMLP(nn.Module):
    def __init__(self, d=32, h=48):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, h, bias=False), nn.Linear(d, h, bias=False)
        self.down_proj = nn.Linear(h, d, bias=False)
        self.act_fn = GeluTanh()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Phi3LikeMLP(nn.Module):
    def __init__(self, d=32, h=40):
        super().__init__()
        self.gate_up_proj = nn.Linear(d, 2 * h, bias=False)
        self.down_proj = nn.Linear(h, d, bias=False)
        self.activation_fn = nn.SiLU()

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(up * self.activation_fn(gate))


class ModernBertLikeMLP(nn.Module):
    """ModernBERT's MLP: one packed linear named Wi, the GELU on the first half."""

    def __init__(self, d=32, h=40):
        super().__init__()
        self.Wi, self.Wo = nn.Linear(d, 2 * h), nn.Linear(h, d)
        self.act, self.drop = nn.GELU(), nn.Dropout(0.1)

    def forward(self, x):
        input, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(input) * gate))


class GeluOnSecondHalf(ModernBertLikeMLP):
    def forward(self, x):
        gate, input = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(input) * gate))


class BertLikeOutput(nn.Module):
    def __init__(self, h=48, d=32):
        super().__init__()
        self.dense = nn.Linear(h, d)
        self.LayerNorm = nn.LayerNorm(d, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.geglu = GemmaLikeMLP()
        self.packed = Phi3LikeMLP()
        self.fc = nn.Linear(32, 48)
        self.act = nn.GELU()
        self.out = BertLikeOutput()

    def forward(self, x):
        h = self.geglu(x) + self.packed(x)
        return self.out(self.act(self.fc(h)), h)


def problems():
    return [PlanProblem("geglu", "geglu", "fp32", [{"M": 6, "N": 48, "tanh": 1}], [1], 10.0, 0.1, ["geglu"]),
            PlanProblem("swiglu_packed", "swiglu_packed", "fp32", [{"M": 6, "N": 40}], [1], 10.0, 0.1, ["packed"]),
            PlanProblem("gelu", "gelu", "fp32", [{"M": 6, "N": 48, "tanh": 0}], [1], 10.0, 0.1, ["act"]),
            PlanProblem("add_layernorm", "add_layernorm", "fp32", [{"M": 6, "N": 32}], [1], 10.0, 0.1, ["out"])]


@pytest.fixture(scope="module")
def mixed():
    torch.manual_seed(0)
    return Mixed().eval()


def test_apply_fused_kinds_match_and_run_each_op(tmp_path, mixed):
    wd = make_workdir(tmp_path / "wd", problems(), model="custom", input_shape=(2, 3))
    patched = apply(mixed, wd)
    assert sorted(patched._autokernel_replaced) == [("act", "gelu"), ("geglu", "geglu"), ("out", "add_layernorm"),
                                                    ("packed", "swiglu_packed")]
    before = dict(OP_CALLS)
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        out, ref = patched(x), mixed(x)
    assert rel(out, ref) < 1e-5
    assert {name: OP_CALLS[op] - before.get(op, 0) for name, op in patched._autokernel_ops.items()} == {
        "geglu": 1, "swiglu_packed": 1, "gelu": 1, "add_layernorm": 1}


def test_a_module_that_only_looks_like_the_kind_is_left_alone(tmp_path):
    class NotGeglu(GemmaLikeMLP):  # gelu on up, not on gate
        def forward(self, x):
            return self.down_proj(self.gate_proj(x) * self.act_fn(self.up_proj(x)))

    model = nn.Sequential()
    model.add_module("geglu", NotGeglu())
    wd = make_workdir(tmp_path / "wd", problems()[:1], model="custom")
    patched = apply(model.eval(), wd)
    assert patched._autokernel_replaced == []
    assert any("probe mismatch" in reason for _, reason in patched._autokernel_skipped)


def test_torch_compile_of_the_patched_model_traces_through_the_ops(tmp_path, mixed):
    """Each op is a torch.library custom op with a fake implementation: dynamo traces the
    whole patched model in one graph (fullgraph) and the ops run inside it."""
    patched = apply(mixed, make_workdir(tmp_path / "wd", problems(), model="custom"))
    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    before = dict(OP_CALLS)
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        assert rel(compiled(x), mixed(x)) < 1e-5
    assert all(OP_CALLS[op] > before.get(op, 0) for op in patched._autokernel_ops.values())


def test_cuda_graph_mode_refuses_a_model_off_the_gpu(tmp_path, mixed):
    wd = make_workdir(tmp_path / "wd", problems(), model="custom")
    with pytest.raises(IntegrateError, match="CUDA-graph mode needs"):
        apply(mixed, wd, cuda_graphs=True)


def test_verify_cuda_graphs_on_a_cpu_run_is_a_usage_error(tmp_path):
    wd = make_workdir(tmp_path / "wd", problems()[:1], model="llama")
    res = CliRunner().invoke(app, ["verify", str(wd), "--cuda-graphs"])
    assert res.exit_code == 2, res.output
    assert "--cuda-graphs needs a GPU run" in res.output and "Traceback" not in res.output
    assert not (wd / "verify.json").exists()


class ScaledEmbedding(nn.Embedding):  # Gemma's scaled word embedding
    def __init__(self, vocab, d, embed_scale):
        super().__init__(vocab, d)
        self.embed_scale = nn.Buffer(torch.tensor(embed_scale), persistent=False)

    def forward(self, ids):
        return super().forward(ids) * self.embed_scale.to(self.weight.dtype)


class ShiftedEmbedding(nn.Embedding):  # keeps a scale but adds, not multiplies
    scale = 2.0

    def forward(self, ids):
        return super().forward(ids) + self.scale


class TinyLM(nn.Module):
    def __init__(self, vocab=50, d=32):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.scaled = ScaledEmbedding(vocab, d, d ** 0.5)
        self.shifted = ShiftedEmbedding(vocab, d)
        self.clipped = nn.Embedding(vocab, d, max_norm=1.0)
        self.proj = nn.Linear(d, d)

    def forward(self, ids):
        return self.proj(self.embed_tokens(ids) + self.scaled(ids))


def test_apply_embedding_gathers_rows_and_falls_back_for_other_ids(tmp_path):
    torch.manual_seed(0)
    model = TinyLM().eval()
    emb = PlanProblem("embedding", "embedding", "fp32", [{"M": 6, "V": 50, "N": 32}], [1], 10.0, 0.1,
                      ["embed_tokens", "scaled", "shifted", "clipped"])
    patched = apply(model, make_workdir(tmp_path / "wd", [emb], model="custom"))
    assert patched._autokernel_replaced == [("embed_tokens", "embedding"), ("scaled", "embedding")]
    assert any(name == "clipped" and "max_norm" in why for name, why in patched._autokernel_skipped)
    assert any(name == "shifted" and "probe mismatch" in why for name, why in patched._autokernel_skipped)
    ids = torch.tensor([[0, 49, 7], [7, 7, 3]])
    op = patched._autokernel_ops["embedding"]
    before = OP_CALLS[op]
    with torch.no_grad():
        assert torch.equal(patched.embed_tokens(ids), model.embed_tokens(ids))  # a gather: exact
        assert torch.equal(patched.scaled(ids), model.scaled(ids))
        assert rel(patched(ids), model(ids)) < 1e-6
        assert OP_CALLS[op] - before == 4
        assert torch.equal(patched.embed_tokens(ids.int()), model.embed_tokens(ids))  # int32 ids: nn.Embedding
    assert OP_CALLS[op] - before == 4
    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        assert rel(compiled(ids), model(ids)) < 1e-6
    assert OP_CALLS[op] - before == 6


def _keeps_kwargs(fn):
    import functools

    @functools.wraps(fn)
    def wrapper(self, x, **kwargs):
        return fn(self, x, **kwargs)

    return wrapper


class PreNormBlock(nn.Module):
    """GPT-2 / Phi-3 style: the sum is normalised and also kept as the next residual."""

    def __init__(self, d=32):
        super().__init__()
        self.ln_1, self.ln_2, self.fc = nn.LayerNorm(d), nn.LayerNorm(d, eps=1e-6), nn.Linear(d, d)

    @_keeps_kwargs
    def forward(self, x, scale=1.0):
        h = self.fc(self.ln_1(x)) * scale
        x = x + h
        residual = x
        y = self.ln_2(x)
        return residual + self.fc(y)


class PostNormBlock(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, x):
        return self.norm(x + self.fc(x))


class Residuals(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre, self.post = PreNormBlock(), PostNormBlock()

    def forward(self, x):
        return self.post(self.pre(x, scale=0.5))


def test_a_residual_add_before_a_plain_norm_is_fused_and_the_sum_kept(tmp_path):
    torch.manual_seed(0)
    model = Residuals().eval()
    add_ln = PlanProblem("add_layernorm", "add_layernorm", "fp32", [{"M": 6, "N": 32}], [2], 10.0, 0.1,
                         ["pre.ln_2", "post.norm"])
    patched = apply(model, make_workdir(tmp_path / "wd", [add_ln], model="custom"))
    assert sorted(patched._autokernel_replaced) == [("post.norm", "add_layernorm"), ("pre.ln_2", "add_layernorm")]
    assert type(model.pre).forward is PreNormBlock.forward  # the original is left as it was
    op = patched._autokernel_ops["add_layernorm"]
    x = torch.randn(2, 3, 32)
    before = OP_CALLS[op]
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-6
        assert OP_CALLS[op] - before == 2
        assert torch.equal(patched.pre.ln_2(x), model.pre.ln_2(x))  # a call without a residual: the plain norm
    assert OP_CALLS[op] - before == 2
    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        assert rel(compiled(x), model(x)) < 1e-6
    assert OP_CALLS[op] - before == 4


def test_an_add_whose_sum_is_changed_before_the_norm_falls_back_or_is_left_alone(tmp_path):
    class Reassigned(PreNormBlock):
        def forward(self, x, scale=1.0):
            x = x + self.fc(x)
            if scale != 1.0:
                x = x * scale  # the norm reads this, not the sum: the fused result is not used
            return self.ln_2(x)

    class InPlace(PreNormBlock):
        def forward(self, x, scale=1.0):
            x = x + self.fc(x)
            residual = x
            residual += 1.0  # in place, through an alias: the norm reads sum + 1
            return self.ln_2(x)

    model = nn.Sequential()
    model.add_module("pre", Reassigned())
    model.add_module("post", InPlace())
    add_ln = PlanProblem("add_layernorm", "add_layernorm", "fp32", [{"M": 6, "N": 32}], [1], 10.0, 0.1,
                         ["pre.ln_2", "post.ln_2"])
    model = model.eval()
    patched = apply(model, make_workdir(tmp_path / "wd", [add_ln], model="custom"))
    assert patched._autokernel_replaced == [("pre.ln_2", "add_layernorm")]
    assert any(name == "post.ln_2" and "could not be rewritten" in reason for name, reason in patched._autokernel_skipped)
    op = patched._autokernel_ops["add_layernorm"]
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        for scale in (1.0, 0.5):
            before = OP_CALLS[op]
            assert rel(patched.pre(x, scale), model.pre(x, scale)) < 1e-6
            assert OP_CALLS[op] - before == 1  # the fused call runs where the add was, either way
        assert rel(patched(x), model(x)) < 1e-6


class CrossBlockLayer(nn.Module):
    """BART's and Whisper's decoder layers: the cross-attention block, in an ``if``, ends with
    the residual add; the norm that reads the sum comes after the block, the sum kept as the
    next residual through an alias."""

    def __init__(self, d=32):
        super().__init__()
        self.cross_norm, self.final_norm, self.fc = nn.LayerNorm(d), nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, x, memory=None):
        if memory is not None:
            residual = x
            x = self.fc(self.cross_norm(x)) * memory
            x = residual + x

        residual = x
        x = self.final_norm(x)
        return residual + self.fc(x)


def test_a_residual_add_ending_an_if_block_is_fused_with_the_norm_after_it(tmp_path):
    """Whisper's decoder layers: the add ending the cross-attention block was planned with the
    final norm but not placed ("not placeable", 0.9-1.2% of hf:whisper's CPU time); fused now,
    the plain norm where the block did not run."""
    torch.manual_seed(0)
    model = CrossBlockLayer().eval()
    add_ln = PlanProblem("add_layernorm", "add_layernorm", "fp32", [{"M": 6, "N": 32}], [1], 10.0, 0.1,
                         ["final_norm"])
    patched = apply(model, make_workdir(tmp_path / "wd", [add_ln], model="custom"))
    assert patched._autokernel_replaced == [("final_norm", "add_layernorm")]
    op = patched._autokernel_ops["add_layernorm"]
    x, memory = torch.randn(2, 3, 32), torch.randn(2, 3, 32)
    with torch.no_grad():
        before = OP_CALLS[op]
        assert rel(patched(x, memory), model(x, memory)) < 1e-6
        assert OP_CALLS[op] - before == 1
        assert rel(patched(x), model(x)) < 1e-6  # no block: the norm normalises x itself
        assert OP_CALLS[op] - before == 1


class GPT2LikeBlock(nn.Module):
    """Hugging Face GPT-2's block: the last add is normalised by the next block's ln_1 (or the
    final ln_f), in another module's forward."""

    def __init__(self, d=32):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.mlp = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        hidden_states = self.attn(hidden_states) + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        hidden_states = residual + self.mlp(hidden_states)

        return hidden_states


class GPT2LikeStack(nn.Module):
    def __init__(self, d=32, layers=2):
        super().__init__()
        self.h = nn.ModuleList(GPT2LikeBlock(d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x):
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class _LayerNormCalls(torch.overrides.TorchFunctionMode):
    calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += func is torch.nn.functional.layer_norm
        return func(*args, **(kwargs or {}))


def test_the_add_ending_a_block_is_fused_ahead_into_the_next_norm(tmp_path):
    """Profiled: each block's last add is paired with the norm the next module call runs (the
    plan says which module holds the add); applied: the add runs as that norm's fused op, and
    the norm returns the rows only for that very sum, unchanged; compiled: the plain add."""
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    torch.manual_seed(0)
    model = GPT2LikeStack().eval()
    x = torch.randn(2, 3, 32)
    plan = profile_model(LoadedModel(model, lambda seed: (x,), "custom", "GPT-2-like", [2, 3]), warmup=0, iters=1)
    add_ln = next(p for p in plan.problems if p.kind == "add_layernorm")
    assert add_ln.add_from == {"h.1.ln_1": "h.0", "ln_f": "h.1"}
    assert set(add_ln.modules) == {"h.0.ln_2", "h.1.ln_2", "h.1.ln_1", "ln_f"} and add_ln.calls == [4]
    assert not any(u.name == "aten::add" for u in plan.uncovered)  # every add is in a fused problem

    add_ln.name, add_ln.shapes = "add_layernorm", [{"M": 6, "N": 32}]
    patched = apply(model, make_workdir(tmp_path / "wd", [add_ln], model="custom"))
    assert sorted(patched._autokernel_replaced) == [(n, "add_layernorm") for n in ("h.0.ln_2", "h.1.ln_1", "h.1.ln_2",
                                                                                    "ln_f")]
    op = patched._autokernel_ops["add_layernorm"]
    before = OP_CALLS[op]
    with torch.no_grad(), _LayerNormCalls() as plain:
        assert rel(patched(x), model(x)) < 1e-6
        assert OP_CALLS[op] - before == 4  # 2 adds + norms per block
        assert plain.calls == 1 + 5  # patched: h.0.ln_1 only (the others return fused rows); original: 5
        assert torch.equal(patched.ln_f(x), model.ln_f(x))  # called on another tensor: the norm itself

        # a hook that changes the block's output in place, or returns another tensor: the norm of
        # what it reads (not scale or shift: a LayerNorm would not see those)
        for hook in (lambda m, args, out: out.mul_(out), lambda m, args, out: torch.tanh(out)):
            handles = [m.h[0].register_forward_hook(hook) for m in (model, patched)]
            assert rel(patched(x), model(x)) < 1e-6
            with torch.inference_mode():  # where tensors have no version counter (verify runs so)
                assert rel(patched(x), model(x)) < 1e-6
            for h in handles:
                h.remove()
    with torch.inference_mode():
        before = OP_CALLS[op]
        assert rel(patched(x), model(x)) < 1e-6
        assert OP_CALLS[op] - before == 4

    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    before = OP_CALLS[op]
    with torch.no_grad():
        assert rel(compiled(x), model(x)) < 1e-6
    assert OP_CALLS[op] - before == 2  # under torch.compile the block-end adds stay adds (inductor fuses them)


class OPTLikeLayer(nn.Module):
    """Hugging Face OPT's decoder layer: its first sum is reshaped to 2-D before its norm reads
    it, and its last is viewed back to 3-D and returned past an ``if`` that does not run (the
    post-norm branch of OPT-350m)."""

    def __init__(self, d=32):
        super().__init__()
        self.self_attn_layer_norm, self.final_layer_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.fc = nn.Linear(d, d), nn.Linear(d, d)
        self.do_layer_norm_before = True

    def forward(self, hidden_states):
        residual = hidden_states
        if self.do_layer_norm_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states = self.attn(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=0.1, training=self.training)
        hidden_states = residual + hidden_states
        if not self.do_layer_norm_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states_shape = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, hidden_states.size(-1))
        residual = hidden_states
        if self.do_layer_norm_before:
            hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.fc(hidden_states)
        hidden_states = (residual + hidden_states).view(hidden_states_shape)
        if not self.do_layer_norm_before:
            hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states


class OPTLikeStack(nn.Module):
    def __init__(self, d=32, layers=2):
        super().__init__()
        self.layers = nn.ModuleList(OPTLikeLayer(d) for _ in range(layers))
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.final_layer_norm(x)


def test_residual_sums_reshaped_before_their_norm_are_fused(tmp_path):
    """OPT's residual adds: the first is reshaped before its norm (in the same forward), the
    last viewed back and returned (fused ahead into the next layer's first norm, or the final
    norm).  Before, the first went unfused and the last found no place (uncovered)."""
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    torch.manual_seed(0)
    model = OPTLikeStack().eval()
    x = torch.randn(2, 3, 32)
    plan = profile_model(LoadedModel(model, lambda seed: (x,), "custom", "OPT-like", [2, 3]), warmup=0, iters=1)
    add_ln = next(p for p in plan.problems if p.kind == "add_layernorm")
    assert add_ln.supported, add_ln.note
    assert add_ln.add_from == {"layers.1.self_attn_layer_norm": "layers.0", "final_layer_norm": "layers.1"}
    fused = ["final_layer_norm", "layers.0.final_layer_norm", "layers.1.final_layer_norm",
             "layers.1.self_attn_layer_norm"]
    assert sorted(add_ln.modules) == fused and add_ln.calls == [4]
    assert not any(u.name == "aten::add" for u in plan.uncovered)

    add_ln.name, add_ln.shapes = "add_layernorm", [{"M": 6, "N": 32}]
    patched = apply(model, make_workdir(tmp_path / "wd", [add_ln], model="custom"))
    assert sorted(patched._autokernel_replaced) == [(n, "add_layernorm") for n in fused]
    assert not patched._autokernel_skipped, patched._autokernel_skipped
    op = patched._autokernel_ops["add_layernorm"]
    before = OP_CALLS[op]
    with torch.no_grad(), _LayerNormCalls() as plain:
        assert rel(patched(x), model(x)) < 1e-6
        assert OP_CALLS[op] - before == 4
        assert plain.calls == 1 + 5  # patched: layers.0's first norm only; the original: 5
        # a hook that changes the layer's output in place, or returns another tensor
        for hook in (lambda m, args, out: out.mul_(out), lambda m, args, out: torch.tanh(out)):
            handles = [m.layers[0].register_forward_hook(hook) for m in (model, patched)]
            assert rel(patched(x), model(x)) < 1e-6
            with torch.inference_mode():
                assert rel(patched(x), model(x)) < 1e-6
            for h in handles:
                h.remove()
    with torch.inference_mode():
        before = OP_CALLS[op]
        assert rel(patched(x), model(x)) < 1e-6
        assert OP_CALLS[op] - before == 4

    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        assert rel(compiled(x), model(x)) < 1e-6


def dropout_add(x, residual, prob, training):
    out = nn.functional.dropout(x, p=prob, training=training)
    out = residual + out
    return out


def torch_add(x, residual, prob, training):
    return torch.add(residual, x)


class FalconLikeLayer(nn.Module):
    """Hugging Face Falcon's decoder layer: its last add is in a function it calls, and it
    returns the sum in a tuple."""

    def __init__(self, d=32):
        super().__init__()
        self.input_layernorm, self.mlp = nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, hidden_states):
        mlp_output = self.mlp(self.input_layernorm(hidden_states))
        output = dropout_add(mlp_output, hidden_states, 0.1, training=self.training)
        return output, None


class TorchAddLayer(FalconLikeLayer):
    def forward(self, hidden_states):
        output = torch_add(self.mlp(self.input_layernorm(hidden_states)), hidden_states, 0.1, training=self.training)
        return output, None


class FalconLikeStack(nn.Module):
    def __init__(self, layer=FalconLikeLayer, d=32, layers=2):
        super().__init__()
        self.h = nn.ModuleList(layer(d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x):
        for block in self.h:
            x = block(x)[0]
        return self.ln_f(x)


def test_the_add_in_a_function_ending_a_block_is_fused_ahead(tmp_path):
    """Falcon's layers end ``output = dropout_add(h, residual, p, training)``: the function's own
    returned add goes ahead into the next norm, through a copy of the function told the layer.
    A function that ends otherwise (``torch.add``) is left alone, and said so."""
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    torch.manual_seed(0)
    x = torch.randn(2, 3, 32)
    for layer, placed in ((FalconLikeLayer, True), (TorchAddLayer, False)):
        model = FalconLikeStack(layer).eval()
        plan = profile_model(LoadedModel(model, lambda seed: (x,), "custom", "Falcon-like", [2, 3]), warmup=0, iters=1)
        add_ln = next(p for p in plan.problems if p.kind == "add_layernorm")
        assert add_ln.add_from == {"h.1.input_layernorm": "h.0", "ln_f": "h.1"}
        assert add_ln.supported is placed, add_ln.note
        add_ln.name, add_ln.shapes, add_ln.supported = "add_layernorm", [{"M": 6, "N": 32}], True
        workdir = make_workdir(tmp_path / layer.__name__, [add_ln], model="custom")
        if not placed:
            with pytest.warns(UserWarning, match="replaced nothing"):
                patched = apply(model, workdir)
            assert {"h.1.input_layernorm", "ln_f"} <= {name for name, _ in patched._autokernel_skipped}
            with torch.no_grad():
                assert rel(patched(x), model(x)) < 1e-6
            continue
        patched = apply(model, workdir)
        op = patched._autokernel_ops["add_layernorm"]
        before = OP_CALLS[op]
        with torch.no_grad(), _LayerNormCalls() as plain:
            assert rel(patched(x), model(x)) < 1e-6
        assert sorted(patched._autokernel_replaced) == [("h.1.input_layernorm", "add_layernorm"),
                                                        ("ln_f", "add_layernorm")]
        assert OP_CALLS[op] - before == 2 and plain.calls == 1 + 3
        assert dropout_add.__code__.co_kwonlyargcount == 0  # the function itself is left as it was
        torch._dynamo.reset()
        compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
        with torch.no_grad():
            assert rel(compiled(x), model(x)) < 1e-6


class RotaryEmbedding(nn.Module):
    """Hugging Face's default-RoPE module: cos/sin tables from the position ids."""

    def __init__(self, head_dim=16, base=10000.0, rope_type="default"):
        super().__init__()
        self.rope_type, self.attention_scaling = rope_type, 1.0
        self.inv_freq = nn.Buffer(1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim)), persistent=False)

    def forward(self, x, position_ids):
        freqs = (self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
                 @ position_ids[:, None, :].float())
        emb = torch.cat((freqs.transpose(1, 2),) * 2, dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def test_apply_rotary_table_computes_both_tables_in_one_op(tmp_path):
    model = nn.Sequential()
    model.add_module("rotary_emb", RotaryEmbedding())
    model.add_module("dynamic", RotaryEmbedding(rope_type="dynamic"))  # inv_freq changes with length: left alone
    table = PlanProblem("rotary_table", "rotary_table", "fp32", [{"B": 2, "S": 7, "D": 16}], [1], 10.0, 0.1,
                        ["rotary_emb", "dynamic"])
    patched = apply(model, make_workdir(tmp_path / "wd", [table], model="custom"))
    assert patched._autokernel_replaced == [("rotary_emb", "rotary_table")]
    op = patched._autokernel_ops["rotary_table"]
    x, pos = torch.randn(2, 7, 32), torch.arange(7)[None, :] + torch.tensor([[0], [3000]])
    before = OP_CALLS[op]
    with torch.no_grad():
        for got, want in zip(patched.rotary_emb(x, pos), model.rotary_emb(x, pos)):
            assert got.shape == want.shape == (2, 7, 16) and (got - want).abs().max() < 1e-5
        patched.rotary_emb(x, pos.int())  # int32 ids: the module's own forward
    assert OP_CALLS[op] - before == 1
    torch._dynamo.reset()
    compiled = torch.compile(patched.rotary_emb, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        assert (compiled(x, pos)[1] - model.rotary_emb(x, pos)[1]).abs().max() < 1e-5
    assert OP_CALLS[op] - before == 2



class LayeredRotaryEmbedding(nn.Module):
    """ModernBERT's: one table per layer type (global and local RoPE, two bases), picked by the
    forward's ``layer_type``."""

    def __init__(self, head_dim=16, bases=(("full_attention", 160000.0), ("sliding_attention", 10000.0)),
                 dynamic=False):
        super().__init__()
        self.layer_types = sorted(t for t, _ in bases)
        self.rope_type = {t: "dynamic" if dynamic and t == "full_attention" else "default" for t, _ in bases}
        for t, base in bases:
            inv = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
            setattr(self, f"{t}_inv_freq", nn.Buffer(inv, persistent=False))
            setattr(self, f"{t}_attention_scaling", 1.0)

    def forward(self, x, position_ids, layer_type):
        inv_freq = getattr(self, f"{layer_type}_inv_freq")
        scaling = getattr(self, f"{layer_type}_attention_scaling")
        emb = torch.cat((position_ids[..., None].float() * inv_freq.float(),) * 2, dim=-1)
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)


def test_apply_rotary_table_takes_one_table_per_layer_type(tmp_path):
    """ModernBERT's rotary module keeps <type>_inv_freq per layer type and takes the type as a
    third argument: it was not a rotary_table (no inv_freq), its ops left uncovered."""
    from autokernel.recognize import rotary_table_freqs

    assert rotary_table_freqs(LayeredRotaryEmbedding()) == {"full_attention": "full_attention_inv_freq",
                                                             "sliding_attention": "sliding_attention_inv_freq"}
    assert rotary_table_freqs(LayeredRotaryEmbedding(dynamic=True)) is None
    model = nn.Sequential()
    model.add_module("rotary_emb", LayeredRotaryEmbedding())
    table = PlanProblem("rotary_table", "rotary_table", "fp32", [{"B": 2, "S": 7, "D": 16}], [2], 10.0, 0.1,
                        ["rotary_emb"])
    patched = apply(model, make_workdir(tmp_path / "wd", [table], model="custom"))
    assert patched._autokernel_replaced == [("rotary_emb", "rotary_table")]
    op = patched._autokernel_ops["rotary_table"]
    x, pos = torch.randn(2, 7, 32), torch.arange(7)[None, :] + torch.tensor([[0], [3000]])
    before = OP_CALLS[op]
    with torch.no_grad():
        tables = {}
        for t in ("full_attention", "sliding_attention"):
            want = LayeredRotaryEmbedding.forward(patched.rotary_emb, x, pos, t)
            for got, w in zip(patched.rotary_emb(x, pos, t), want):
                assert got.shape == w.shape == (2, 7, 16) and (got - w).abs().max() < 1e-5
            tables[t] = want[0]
        assert (tables["full_attention"] - tables["sliding_attention"]).abs().max() > 0.1  # two bases
        got = patched.rotary_emb(x, pos, layer_type="sliding_attention")[1]
        assert (got - LayeredRotaryEmbedding.forward(patched.rotary_emb, x, pos, "sliding_attention")[1]).abs().max() < 1e-5
    assert OP_CALLS[op] - before == 3


def test_apply_rotary_table_takes_a_module_cast_to_bf16(tmp_path):
    """model.to(torch.bfloat16) casts RoPE's inv_freq too; the module still computes its angles in
    fp32 from the rounded frequencies, and so does the op when handed them as fp32.  An fp32 run of
    the same file applied first in the same process registers the same op: the bf16 model's
    switched class is still its own (the switched classes were cached by op alone, and the bf16
    module got the fp32 one, whose forward never called the op on bf16 tensors)."""
    def model_in(dtype):
        model = nn.Sequential()
        model.add_module("rotary_emb", RotaryEmbedding())
        return model.to(dtype)

    def table(dtype):
        return PlanProblem("rotary_table", "rotary_table", dtype, [{"B": 2, "S": 7, "D": 16}], [1], 10.0, 0.1,
                           ["rotary_emb"])

    fp32 = apply(model_in(torch.float32), make_workdir(tmp_path / "fp32", [table("fp32")], model="custom"))
    model = model_in(torch.bfloat16)
    assert model.rotary_emb.inv_freq.dtype == torch.bfloat16
    patched = apply(model, make_workdir(tmp_path / "bf16", [table("bf16")], model="custom"))
    assert patched._autokernel_ops["rotary_table"] == fp32._autokernel_ops["rotary_table"]
    assert patched._autokernel_replaced == [("rotary_emb", "rotary_table")]
    op = patched._autokernel_ops["rotary_table"]
    x, pos = torch.randn(2, 7, 32).bfloat16(), torch.arange(7)[None, :] + torch.tensor([[0], [3000]])
    before = OP_CALLS[op]
    with torch.no_grad():
        for got, want in zip(patched.rotary_emb(x, pos), model.rotary_emb(x, pos)):
            assert got.dtype == want.dtype == torch.bfloat16 and (got.float() - want.float()).abs().max() < 1e-2
    assert OP_CALLS[op] - before == 1

def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class SiLUActivation(nn.Module):  # transformers' ACT2FN["silu"] is a class of its own, not nn.SiLU
    def forward(self, x):
        return nn.functional.silu(x)


class HFStyleAttention(nn.Module):
    """Hugging Face's current layout: the forward is decorated (functools.wraps) and calls a
    module-level apply_rotary_pos_emb."""

    @_keeps_kwargs
    def forward(self, x, cos=None, sin=None):
        q = x.view(1, 2, x.shape[1], 16)
        q, k = apply_rotary_pos_emb(q, q * 2, cos, sin)
        return (q + k).reshape(x.shape)


class HFStyleMLP(nn.Module):
    def __init__(self, d=32, h=48):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, h, bias=False), nn.Linear(d, h, bias=False)
        self.down_proj = nn.Linear(h, d, bias=False)
        self.act_fn = SiLUActivation()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def test_decorated_methods_and_transformers_silu_class_are_switched(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("attn", HFStyleAttention())
    model.add_module("mlp", HFStyleMLP())
    model = model.eval()
    probs = [PlanProblem("rotary", "rotary", "fp32", [{"B": 1, "H": 2, "S": 5, "D": 16}], [2], 10.0, 0.1, ["attn"]),
             PlanProblem("swiglu", "swiglu", "fp32", [{"M": 5, "N": 48}], [1], 10.0, 0.1, ["mlp"])]
    patched = apply(model, make_workdir(tmp_path / "wd", probs, model="custom"))
    assert sorted(patched._autokernel_replaced) == [("attn", "rotary"), ("mlp", "swiglu")]
    x = torch.randn(1, 5, 32)
    angle = torch.rand(5, 16) * 6
    cos, sin = angle.cos()[None, None], angle.sin()[None, None]
    before = {op: OP_CALLS[op] for op in patched._autokernel_ops.values()}
    with torch.no_grad():
        assert rel(patched.attn(x, cos=cos, sin=sin), model.attn(x, cos=cos, sin=sin)) < 1e-5
        assert rel(patched.mlp(x), model.mlp(x)) < 1e-5
    assert {name: OP_CALLS[op] - before[op] for name, op in patched._autokernel_ops.items()} == {"rotary": 2, "swiglu": 1}


def test_hugging_face_attention_reaches_our_op_through_the_attention_interface(tmp_path):
    """HF attention modules call the function ``ALL_ATTENTION_FUNCTIONS`` names for the
    config's implementation, not SDPA in their own code: before, the plan counted attention
    that ``apply`` could not place (GPT-2, LLaMA, Phi-3...)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=128, vocab_size=128)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    probs = [PlanProblem("attention", "attention", "fp32", [{"B": 2, "H": 4, "Hkv": 2, "S": 6, "D": 16, "causal": 1}],
                         [1], 10.0, 0.1, ["model.layers.0.self_attn"])]
    patched = apply(model, make_workdir(tmp_path / "wd", probs, model="custom"))
    # one place: the attention module (not the models, whose attn-implementation setters only
    # name the attention functions; their classes stay as they were)
    assert patched._autokernel_replaced == [("model.layers.0.self_attn", "attention")]
    assert type(patched) is transformers.LlamaForCausalLM and type(patched.model) is transformers.LlamaModel
    ids = torch.randint(0, 128, (2, 6))
    op = patched._autokernel_ops["attention"]
    before = OP_CALLS[op]
    with torch.no_grad():
        got = patched(ids, use_cache=False).logits
        assert OP_CALLS[op] - before == 1  # GQA (4 query heads over 2) and causal, no mask: ours
        padded = torch.ones(2, 6, dtype=torch.long)
        padded[0, :2] = 0
        patched(ids, attention_mask=padded, use_cache=False)  # a padding mask: transformers' SDPA path
        assert OP_CALLS[op] - before == 1
    original = transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    original.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert rel(got, original(ids, use_cache=False).logits) < 1e-5



def _op_calls_in_one_forward(wd, spec: str, config: str, shape: list[int], kind: str) -> int:
    """``spec`` profiled, ``kind``'s starter alone placed by ``apply``, and how many times its op
    ran in one forward."""
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    from test_softcap import _patched_with_starter

    loaded = load_model(spec, config_overrides=config, input_shape=shape, dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    problem = next(p for p in plan.problems if p.kind == kind)
    wd.mkdir(parents=True)
    calls, _, _ = _patched_with_starter(wd, loaded, plan, problem, 0)
    return calls


needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers is not installed")


@needs_transformers
def test_models_of_two_widths_in_one_process_each_run_the_residual_output_op(tmp_path):
    """The classes ``apply`` makes are kept by what they switch and shared by the modules that
    switch alike.  The residual-output class (BERT's and RoBERTa's ``LayerNorm(dense(h) +
    residual)``) baked the norm's width into its forward but was kept without it: a second model
    of another width got the first one's class, whose guard declined every call (the call count
    found RoBERTa's add_layernorm op taking 1 of 5 calls after a narrower RoBERTa was placed)."""
    config = "hidden_size={},num_hidden_layers=1,num_attention_heads=2,intermediate_size=64,vocab_size=64"
    for width in (32, 64):
        calls = _op_calls_in_one_forward(tmp_path / f"w{width}", "hf:roberta", config.format(width), [1, 8],
                                         "add_layernorm")
        assert calls == 3, width  # the embeddings' add and the layer's two


@needs_transformers
def test_models_of_two_head_sizes_in_one_process_each_run_the_written_out_attention_op(tmp_path):
    """The rewritten attention's class was kept by the op alone, and its guard holds the head
    dims the op was judged on: BLOOM with 4 heads placed after BLOOM with 2 (head dims 8 and 16)
    got the first one's class, and its attention never reached the op."""
    for heads in (2, 4):
        calls = _op_calls_in_one_forward(tmp_path / f"h{heads}", "hf:bloom",
                                         f"hidden_size=32,n_layer=1,n_head={heads},vocab_size=64", [1, 16],
                                         "attention_masked")
        assert calls == 1, heads


@needs_transformers
def test_models_of_two_head_sizes_in_one_process_each_run_the_sdpa_attention_op(tmp_path):
    """The same for the classes that route F.scaled_dot_product_attention to the ops: kept by the
    ops alone, their replacement holds the head dims the op was judged on."""
    for heads in (2, 4):
        calls = _op_calls_in_one_forward(tmp_path / f"h{heads}", "hf:llama",
                                         f"hidden_size=32,num_hidden_layers=1,num_attention_heads={heads},"
                                         f"num_key_value_heads={heads},intermediate_size=64,vocab_size=64",
                                         [1, 16], "attention")
        assert calls == 1, heads


def test_packed_geglu_is_found_by_its_shapes_and_probed(tmp_path):
    """ModernBERT's Wi/Wo MLP (no gate_up name) takes geglu_packed; one whose GELU reads the
    second half computes something else and is left alone."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("mlp", ModernBertLikeMLP())
    model.add_module("other", GeluOnSecondHalf())
    model.eval()
    plan = [PlanProblem("geglu_packed", "geglu_packed", "fp32", [{"M": 6, "N": 40, "tanh": 0}], [2], 10.0, 0.1,
                        ["mlp", "other"])]
    patched = apply(model, make_workdir(tmp_path / "wd", plan, model="custom"))
    assert patched._autokernel_replaced == [("mlp", "geglu_packed")]
    assert any(name == "other" and "probe mismatch" in reason for name, reason in patched._autokernel_skipped)
    before = dict(OP_CALLS)
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        assert rel(patched.mlp(x), ModernBertLikeMLP.forward(model.mlp, x)) < 1e-5
    assert OP_CALLS[patched._autokernel_ops["geglu_packed"]] - before.get(patched._autokernel_ops["geglu_packed"], 0) == 1
