"""Before the loop: a problem that ``apply`` can place nowhere in the model is not optimized.

Mixtral's router computes a softmax (and Qwen-MoE's too) with ``F.softmax`` inside its
forward: the profiler found the kind, no applier could switch it, and the loop used to spend
budget on it (reported unsupported since 2026-12-05, placed since 2026-12-07).  Gemma's norms scale by ``1 + w``: they used to be found and optimized, then left
alone by ``apply``'s probe; they are placed now.
"""
from __future__ import annotations

import importlib.util
import json
import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.integrate.placement import check_placement, structural_copy  # noqa: E402
from autokernel.loop.targets import targets_from_plan  # noqa: E402
from autokernel.models import load_model  # noqa: E402
from autokernel.profiler import profile_model  # noqa: E402

HF = importlib.util.find_spec("transformers") is not None
GEMMA = "hidden_size=64,num_hidden_layers=2,num_attention_heads=2,num_key_value_heads=1,head_dim=32,intermediate_size=128,vocab_size=256"


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_the_router_softmax_and_linear_are_placed(tmp_path):
    """The router's ``F.linear(h, self.weight)`` and ``F.softmax(logits, dim=-1)``: reported
    unsupported (softmax) and not placeable (the matmul problem's share there) until 2026-12-07;
    rebound in the router's forward since: both ops take the router's calls (the placement
    check's counting forward), and with the softmax starter the output matches."""
    from autokernel.integrate import OP_CALLS
    from autokernel.integrate.call_counts import EXTRA_CALLS
    from autokernel.integrate.selection import DECLINED

    config = ("hidden_size=32,num_hidden_layers=1,num_attention_heads=2,num_key_value_heads=1,intermediate_size=32,"
              "vocab_size=64,num_local_experts=4")
    plan = profile_model(load_model("hf:mixtral", config_overrides=config, input_shape=[1, 8], dtype=torch.float32),
                         warmup=0, iters=1)
    gate = "model.model.layers.0.mlp.gate"
    for kind in ("softmax", "matmul"):
        p = next(p for p in plan.problems if p.kind == kind)
        assert p.supported and "not placeable" not in p.note and DECLINED not in p.note and EXTRA_CALLS not in p.note
        assert p.module_time_us.get(gate, 0) > 0, (kind, p.module_time_us)
    patched = placed_and_matching(tmp_path, "hf:mixtral", config, [1, 8], kinds=("softmax",))
    assert dict(patched._autokernel_replaced) == {gate: "softmax"}
    op = patched._autokernel_ops["softmax"]
    before = OP_CALLS[op]
    with torch.no_grad():
        patched(torch.randint(0, 64, (1, 8)))
    assert OP_CALLS[op] - before == 1


def test_the_functional_linear_finds_its_transposed_weight_after_a_move():
    """The router's rebound ``F.linear`` takes the module's own weight through the transposed copy
    kept beside it; a module moved with ``.to()`` (its buffers replaced) still finds it, and any
    other weight goes to PyTorch."""
    from types import SimpleNamespace

    from autokernel.integrate.functionals import keep_transposed, linear_replacement

    linear = linear_replacement(SimpleNamespace(op=lambda a, b: 2 * (a @ b), dtype=torch.float32))
    router = torch.nn.Module()
    router.weight = torch.nn.Parameter(torch.randn(4, 8))
    assert keep_transposed(router, torch.float32) == 1
    x = torch.randn(3, 8)
    with torch.no_grad():
        want = 2 * torch.nn.functional.linear(x, router.weight)
        assert torch.allclose(linear(x, router.weight), want, atol=1e-5)
        router.double().float()
        assert torch.allclose(linear(x, router.weight), 2 * torch.nn.functional.linear(x, router.weight), atol=1e-5)
        other = torch.randn(4, 8)
        assert torch.allclose(linear(x, other), torch.nn.functional.linear(x, other))


def starters_workdir(tmp_path, plan, kinds) -> list:
    """``tmp_path`` as a run's workdir: ``plan`` cut to its problems of ``kinds``, each with its
    starter as the kernel.  Those problems."""
    import shutil

    from autokernel.plan import save_plan
    from autokernel.problems.registry import KERNELS_DIR

    plan.problems = [p for p in plan.problems if p.kind in kinds]
    for p in plan.problems:
        (tmp_path / "problems" / p.name).mkdir(parents=True)
        shutil.copyfile(KERNELS_DIR / f"{p.kind}.py", tmp_path / "problems" / p.name / "kernel.py")
    save_plan(plan, tmp_path / "plan.json")
    return plan.problems


def placed_and_matching(tmp_path, spec: str, config: str, shape: list[int], kinds=("rmsnorm", "add_rmsnorm")):
    """Profile ``spec``; its problems of ``kinds`` are supported; ``apply`` with the starters
    switches them, skips none, and the output matches.  The patched model."""
    from autokernel.integrate import apply

    loaded = load_model(spec, config_overrides=config, input_shape=shape, dtype=torch.float32)
    norms = starters_workdir(tmp_path, profile_model(loaded, warmup=0, iters=1), kinds)
    assert {p.kind for p in norms} == set(kinds)
    assert all(p.supported for p in norms), [(p.name, p.note) for p in norms]
    patched = apply(loaded.model, tmp_path)
    placed = {kind for _, kind in patched._autokernel_replaced}
    assert placed == set(kinds) and not patched._autokernel_skipped, patched._autokernel_skipped
    with torch.no_grad():
        x = loaded.make_inputs(1)
        ref, out = loaded.model(*x), patched(*x)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-5
    return patched


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_gemma_norms_are_placed_and_match(tmp_path):
    placed_and_matching(tmp_path, "hf:gemma", GEMMA, [1, 8])


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_t5_norms_are_placed_and_match(tmp_path):
    """T5LayerNorm is an RMS norm under a LayerNorm name, and T5's attention blocks return their
    residual sum as the first of a tuple, which the next block's norm reads (fused ahead)."""
    patched = placed_and_matching(tmp_path, "hf:t5", "d_model=64,num_layers=2,num_heads=4,d_ff=128,d_kv=16,"
                                        "vocab_size=256", [2, 16])
    replaced = dict(patched._autokernel_replaced)
    assert replaced["model.encoder.block.0.layer.1.layer_norm"] == "add_rmsnorm"  # after self-attention's tuple
    assert replaced["model.decoder.block.0.layer.2.layer_norm"] == "add_rmsnorm"  # after cross-attention's


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("parallel", [True, False])
def test_gpt_neox_layer_end_adds_in_both_residual_forms_are_fused_ahead(tmp_path, parallel):
    """GPTNeoXLayer assigns its output's add in both branches of an ``if`` (parallel and
    sequential residuals) and returns it after: each branch's add is fused ahead."""
    patched = placed_and_matching(
        tmp_path, "hf:gpt_neox", "hidden_size=64,num_hidden_layers=2,num_attention_heads=4,intermediate_size=128,"
        f"vocab_size=256,use_parallel_residual={parallel}", [2, 16], kinds=("layernorm", "add_layernorm"))
    assert dict(patched._autokernel_replaced)["model.gpt_neox.final_layer_norm"] == "add_layernorm"


class _LayerNormCalls(torch.overrides.TorchFunctionMode):
    calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += func is torch.nn.functional.layer_norm
        return func(*args, **(kwargs or {}))


def fused_runs(patched, shape: list[int]) -> tuple[int, int]:
    """(add_layernorm op calls, F.layer_norm calls) in one forward of ``patched`` on token ids."""
    from autokernel.integrate import OP_CALLS

    op = next(op for name, op in patched._autokernel_ops.items() if name.startswith("add_layernorm"))
    before = OP_CALLS[op]
    with torch.no_grad(), _LayerNormCalls() as plain:
        patched(torch.randint(0, 256, shape))
    return OP_CALLS[op] - before, plain.calls


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_opt_residual_adds_are_placed_and_match(tmp_path):
    """OPTDecoderLayer reshapes its first residual sum to 2-D before its norm reads it, and
    returns its last viewed back to 3-D, past its post-norm ``if``: the first was a plain
    layernorm (its add uncovered) and the last found no place (counted uncovered)."""
    patched = placed_and_matching(tmp_path, "hf:opt", "hidden_size=64,num_hidden_layers=2,num_attention_heads=4,"
                                  "ffn_dim=128,word_embed_proj_dim=64,vocab_size=256", [2, 16],
                                  kinds=("layernorm", "add_layernorm"))
    assert fused_runs(patched, [2, 16]) == (4, 0)  # one op per fused norm, no norm of a sum again
    replaced = dict(patched._autokernel_replaced)
    decoder = "model.model.decoder"
    assert replaced[f"{decoder}.layers.0.final_layer_norm"] == "add_layernorm"  # reshaped, in the layer
    assert replaced[f"{decoder}.layers.1.self_attn_layer_norm"] == "add_layernorm"  # layer 0's last sum, ahead
    assert replaced[f"{decoder}.final_layer_norm"] == "add_layernorm"
    assert replaced[f"{decoder}.layers.0.self_attn_layer_norm"] == "layernorm"  # after the position embeddings


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_falcon_layer_end_adds_in_its_dropout_add_function_are_fused_ahead(tmp_path):
    """FalconDecoderLayer ends ``output = dropout_add(mlp_output, residual, p, training); return
    output, attn_weights``, the add inside that function: it found no place, and the next
    layer's first norm and the final norm counted as not covered."""
    patched = placed_and_matching(tmp_path, "hf:falcon", "hidden_size=64,num_hidden_layers=2,num_attention_heads=4,"
                                  "vocab_size=256", [2, 16], kinds=("layernorm", "add_layernorm"))
    assert fused_runs(patched, [2, 16]) == (2, 0)
    replaced = dict(patched._autokernel_replaced)
    assert replaced["model.transformer.h.1.input_layernorm"] == "add_layernorm"
    assert replaced["model.transformer.ln_f"] == "add_layernorm"


def test_the_check_leaves_the_model_as_it_was_and_copies_no_weights():
    loaded = load_model("llama", input_shape=[1, 8], dtype=torch.float32, config_overrides={"n_layers": "1"})
    model = loaded.model
    classes = {name: type(m) for name, m in model.named_modules()}
    plan = profile_model(loaded, warmup=0, iters=1)
    check = check_placement(model, plan)
    assert plan.supported and check.unplaceable == {} and check.unplaced == {}
    assert {name: type(m) for name, m in model.named_modules()} == classes
    copy = structural_copy(model)
    assert all(a is b for a, b in zip(model.parameters(), copy.parameters()))
    assert copy is not model and copy.layers[0] is not model.layers[0]


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_cohere_interleaved_rotary_gets_the_pairs_op_and_its_bias_free_norms_placed(tmp_path):
    """Cohere's ``rotate_half`` rotates interleaved pairs: the rotary op (halves) put in its place
    made the patched model's output wrong by 0.6% (fp32).  The function is probed now: the plan
    has a rotary_interleaved problem, a rotary (halves) one finds no place, and the patched model
    matches."""
    import dataclasses
    import shutil

    from autokernel.integrate import apply
    from autokernel.plan import save_plan
    from autokernel.problems.registry import KERNELS_DIR

    loaded = load_model("hf:cohere", config_overrides="hidden_size=64,num_hidden_layers=2,num_attention_heads=4,"
                        "num_key_value_heads=2,intermediate_size=128,vocab_size=256", input_shape=[2, 16],
                        dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    pairs = next(p for p in plan.problems if p.kind == "rotary_interleaved")
    assert pairs.supported and not any(p.kind == "rotary" for p in plan.problems)
    # the halves' op given the same places anyway: it must find none
    plan.problems.append(dataclasses.replace(pairs, name="rotary", kind="rotary"))
    for p in plan.supported:
        (tmp_path / "problems" / p.name).mkdir(parents=True)
        shutil.copyfile(KERNELS_DIR / f"{p.kind}.py", tmp_path / "problems" / p.name / "kernel.py")
    save_plan(plan, tmp_path / "plan.json")
    patched = apply(loaded.model, tmp_path)
    kinds = {kind for _, kind in patched._autokernel_replaced}
    assert "rotary" not in kinds and {"rotary_interleaved", "attention"} <= kinds
    # CohereLayerNorm: a LayerNorm of its own class and without bias (the op gets zeros)
    assert {"layernorm", "add_layernorm"} <= kinds
    with torch.no_grad():
        x = loaded.make_inputs(1)
        ref, out = loaded.model(*x), patched(*x)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-5


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_a_gelu_module_called_as_a_function_is_placed(tmp_path):
    """RoBERTa's LM head calls ``gelu(x)``, a GELUActivation object in its module's globals."""
    patched = placed_and_matching(tmp_path, "hf:roberta", "hidden_size=64,num_hidden_layers=1,num_attention_heads=4,"
                                  "intermediate_size=128,vocab_size=256", [2, 16], kinds=("gelu",))
    assert dict(patched._autokernel_replaced) == {"model.lm_head": "gelu"}


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_bart_layers_get_linear_gelu_and_their_residual_adds_fused_in_one_forward(tmp_path):
    """BART's layer computes ``activation_fn(fc1(h))`` amid attention and residual adds: its forward
    is rewritten for linear_gelu, then that rewrite is rewritten again for the add before its
    final norm (the second applier reads the first one's tree, not the source file)."""
    from autokernel.integrate import OP_CALLS

    patched = placed_and_matching(
        tmp_path, "hf:bart", "d_model=64,encoder_layers=2,decoder_layers=2,encoder_attention_heads=4,"
        "decoder_attention_heads=4,encoder_ffn_dim=128,decoder_ffn_dim=128,vocab_size=256", [2, 16],
        kinds=("linear_gelu", "add_layernorm"))
    replaced = set(patched._autokernel_replaced)
    for layer in ("encoder.layers.0", "decoder.layers.1"):
        assert (f"model.model.{layer}", "linear_gelu") in replaced
        assert (f"model.model.{layer}.final_layer_norm", "add_layernorm") in replaced
    op = patched._autokernel_ops["linear_gelu"]
    before = OP_CALLS[op]
    with torch.no_grad():
        patched(torch.randint(0, 256, (2, 16)))
    assert OP_CALLS[op] - before == 4  # one a layer


class _ScoresThenProject(torch.nn.Module):
    """A linear child, and a batched matmul in the module's own forward (eager attention's
    q @ k^T, as GPT-OSS's attention with sinks runs it)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x):
        scores = torch.matmul(x, x.transpose(-2, -1))  # [B, S, S]
        return self.proj(torch.matmul(scores, x))


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _ScoresThenProject()

    def forward(self, x):
        return self.block(x)


def test_a_gemm_in_a_modules_own_forward_is_not_placed_by_switching_its_linear_children(tmp_path):
    """The matmul applier switches nn.Linear modules: the block's own matmuls stay PyTorch's.
    Their time counted as covered because the block's linear child was switched (hf:gpt_oss's
    eager attention, 2.2% of it at 2x128 tokens); it counts as not covered now, by module."""
    from autokernel.models import LoadedModel

    model = _Model().eval()
    loaded = LoadedModel(model=model, make_inputs=lambda seed: (torch.randn(2, 48, 32, generator=torch.Generator().manual_seed(seed)),),
                         spec="test", description="test", input_shape=[2, 48, 32], input_kind="float")
    plan = profile_model(loaded, warmup=0, iters=1)  # placement checked (``mark_placement``)
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    assert matmul.supported and set(matmul.module_time_us) == {"block.proj"}, matmul.module_time_us
    block = next(u for u in plan.not_covered if u.name.startswith(f"{matmul.name} (matmul) at block,"))
    assert block.time_us > 0 and "not placeable at block" in matmul.note


class _ReluLayer(torch.nn.Module):
    """fc1 + ReLU amid more (linear_relu rewrites this forward); its last add is ``torch.add``,
    which the residual applier cannot send ahead into the next layer's norm."""

    def __init__(self, d=32):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc1, self.fc2, self.act = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d), torch.nn.ReLU()

    def forward(self, x):
        h = self.act(self.fc1(self.norm(x)))
        return torch.add(x, self.fc2(h))


class _ReluStack(torch.nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.layers = torch.nn.ModuleList([_ReluLayer(d), _ReluLayer(d)])
        self.proj, self.ln_f = torch.nn.Linear(d, d), torch.nn.LayerNorm(d)

    def forward(self, x):
        x = self.layers[1](self.layers[0](x))
        return self.ln_f(x + self.proj(x))


def test_a_module_its_applier_skipped_is_not_placed_by_another_kinds_switch(tmp_path):
    """Layer 0's last add is paired with layer 1's first norm (add_layernorm, placed at the
    final norm), which the residual applier skips; linear_relu switched layer 1, around that
    norm, and the check counted the norm's time as covered."""
    from autokernel.models import LoadedModel

    loaded = LoadedModel(model=_ReluStack().eval(),
                         make_inputs=lambda seed: (torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(seed)),),
                         spec="test", description="test", input_shape=[2, 8, 32], input_kind="float")
    plan = profile_model(loaded, warmup=0, iters=1)
    assert next(p for p in plan.problems if p.kind == "linear_relu").supported
    add_ln = next(p for p in plan.problems if p.kind == "add_layernorm")
    assert add_ln.supported and add_ln.modules == ["layers.1.norm", "ln_f"]
    assert "not placeable at layers.1.norm: add_layernorm: the add feeding it" in add_ln.note
    assert set(add_ln.module_time_us) == {"ln_f"}
    assert any(u.name.startswith(f"{add_ln.name} (add_layernorm) at layers.1.norm") for u in plan.not_covered)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_gpt2_conv1d_gemms_are_placed_and_match():
    """GPT-2's attention and MLP projections are ``Conv1D`` (``x @ W + b``, W stored [K, N]), not
    nn.Linear: the matmul applier passed them by, while the placement check counted their GEMMs
    as placed because the attention module around them was switched for other kinds (30.6% of
    hf:gpt2's time at 2x64 tokens once the check asked for the module itself).  They take the op
    now (the matmul starter here), W as it is stored."""
    from autokernel.integrate.apply import place_ops
    from autokernel.integrate.ops import OP_CALLS, register_kernel_op
    from autokernel.integrate.selection import KernelOp
    from autokernel.problems.base import parse_dtype
    from autokernel.problems.registry import KERNELS_DIR

    loaded = load_model("hf:gpt2", config_overrides="n_embd=64,n_layer=1,n_head=2,vocab_size=128", input_shape=[1, 8],
                        dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    assert {"model.transformer.h.0.attn.c_attn", "model.transformer.h.0.mlp.c_proj"} <= set(matmul.module_time_us)
    opname, op = register_kernel_op("matmul", "conv1d_test", KERNELS_DIR / "matmul.py")
    patched = structural_copy(loaded.model)
    placed = place_ops(patched, [KernelOp(matmul, opname, op, parse_dtype(matmul.dtype), KERNELS_DIR / "matmul.py")])
    assert {("model.transformer.h.0.attn.c_attn", "matmul"), ("model.transformer.h.0.attn.c_proj", "matmul"),
            ("model.transformer.h.0.mlp.c_proj", "matmul")} <= set(placed.replaced)  # c_fc: linear_gelu's
    c_attn = patched.model.transformer.h[0].attn.c_attn
    assert c_attn._autokernel_weight_t.data_ptr() == c_attn.weight.data_ptr()  # no copy of a [K, N] weight
    before = OP_CALLS[opname]
    with torch.no_grad():
        x = loaded.make_inputs(1)
        ref, out = loaded.model(*x), patched(*x)
    assert OP_CALLS[opname] - before >= 4
    assert ((out - ref).norm() / ref.norm()).item() < 1e-5


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_apply_to_the_bare_hf_model_places_what_the_wrapped_one_does(tmp_path):
    """A new user built GPT2LMHeadModel and applied an ``hf:gpt2`` run to it: the residual adds
    (add_layernorm, fused ahead) found no place, while verify, on the loader's wrapper, applied
    them: the plan's paths are the wrapper's (``model.transformer.h.0.ln_2``), the bare model's
    ``transformer.h.0.ln_2``, and the residual appliers matched paths exactly."""
    import json
    import shutil

    import autokernel
    from autokernel.integrate.module_paths import rebase
    from autokernel.plan import save_plan
    from autokernel.problems.registry import KERNELS_DIR

    loaded = load_model("hf:gpt2", config_overrides="n_embd=64,n_layer=2,n_head=2,vocab_size=128", input_shape=[1, 8],
                        dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    assert any(p.kind == "add_layernorm" and p.add_from for p in plan.problems)
    for p in plan.problems:
        if p.supported and p.kind != "matmul":
            (tmp_path / "problems" / p.name).mkdir(parents=True)
            shutil.copyfile(KERNELS_DIR / f"{p.kind}.py", tmp_path / "problems" / p.name / "kernel.py")
    plan.problems = [p for p in plan.problems if p.kind != "matmul"]
    save_plan(plan, tmp_path / "plan.json")
    (tmp_path / "run.json").write_text(json.dumps({"model": "hf:gpt2", "dtype": "fp32", "device": "cpu"}))

    bare = loaded.model.model
    assert not any(name.startswith("model.") for name, _ in bare.named_modules())
    wrapped_kinds = sorted(kind for _, kind in autokernel.apply(loaded.model, tmp_path)._autokernel_replaced)
    patched = autokernel.apply(bare, tmp_path)
    assert sorted(kind for _, kind in patched._autokernel_replaced) == wrapped_kinds
    assert "add_layernorm" in wrapped_kinds
    assert ("transformer.h.1.ln_1", "add_layernorm") in patched._autokernel_replaced
    x = loaded.make_inputs(3)
    with torch.no_grad():
        ref, out = bare(*x).logits, patched(*x).logits
    assert ((out - ref).norm() / ref.norm()).item() < 1e-5

    # a model in another dtype than the run's, and another model: each said (new-user trial: both
    # applied without a word, the first listing attention as replaced while PyTorch's ran)
    import copy
    import warnings as warnings_module

    with pytest.warns(UserWarning, match="made for fp32 and this model is bf16"):
        autokernel.apply(copy.deepcopy(bare).to(torch.bfloat16), tmp_path)
    other = load_model("llama", config_overrides={"n_layers": "1"}, input_shape=[1, 8], dtype=torch.float32)
    with pytest.warns(UserWarning, match="modules the run's plan names are not in this model.*hf:gpt2"):
        autokernel.apply(other.model, tmp_path)
    with warnings_module.catch_warnings():
        warnings_module.simplefilter("error")  # the model the run was made for: neither
        autokernel.apply(bare, tmp_path)

    # the map itself: the plan's wrapper dropped, a user's wrapper added, paths outside either kept
    names = {"", "transformer", "transformer.h.0", "lm_head"}
    drop = rebase(["model.transformer.h.0", "model.lm_head", "model"], names)
    assert [drop(p) for p in ("model.transformer.h.0", "model.lm_head", "model")] == ["transformer.h.0", "lm_head", ""]
    add = rebase(["transformer.h.0"], {"", "net", "net.transformer", "net.transformer.h.0"})
    assert add("transformer.h.0") == "net.transformer.h.0"
    same = rebase(["transformer.h.0"], names)
    assert same("transformer.h.0") == "transformer.h.0"


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_t5_attention_with_its_position_bias_runs_the_masked_kernel(tmp_path):
    """New-user trial: T5's attention was profiled (and tuned) as attention_masked, listed as
    replaced, and never called: T5 hands transformers' attention function its position bias,
    and every call with one went back to transformers.  The bias, the padding mask and causality
    are now one additive mask for the kernel, as transformers' own SDPA path builds it."""
    from autokernel.integrate.ops import OP_CALLS

    before = dict(OP_CALLS)
    patched = placed_and_matching(tmp_path, "hf:t5", "d_model=64,num_layers=2,num_heads=4,d_ff=128,d_kv=16,"
                                  "vocab_size=256", [2, 16], kinds=("attention_masked",))
    (op,) = patched._autokernel_ops.values()
    assert OP_CALLS[op] - before.get(op, 0) > 0


SHIFTED_POSITIONS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class ShiftedPositions(nn.Embedding):
    def forward(self, ids):  # a gather at an offset of its own, no super().forward: no place for the op
        return F.embedding(ids + 2, self.weight)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(512, 64)
        self.pos = ShiftedPositions(130, 64)
        self.head = nn.Linear(64, 512)

    def forward(self, ids):
        return self.head(self.tok(ids) + self.pos(torch.arange(ids.shape[1])))
"""


def test_the_shapes_of_places_apply_cannot_switch_leave_the_problem(tmp_path):
    """New-user trial (hf:opt, whose learned position embedding is placed since 2026-12-07): the
    embedding problem kept the shape of a position embedding apply could not switch beside the
    token embedding's, each weighing half of the score: the loop tuned for a shape that never
    runs the kernel."""
    (tmp_path / "shifted.py").write_text(SHIFTED_POSITIONS)
    loaded = load_model(f"{tmp_path / 'shifted.py'}:Model", input_shape=[2, 16], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    embedding = next(p for p in plan.problems if p.kind == "embedding")
    assert "not placeable at pos" in embedding.note
    assert [s["V"] for s in embedding.shapes] == [512] and len(embedding.calls) == 1


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("spec,config", [
    ("hf:opt", "hidden_size=64,num_hidden_layers=1,num_attention_heads=4,ffn_dim=128,word_embed_proj_dim=64,"
               "vocab_size=512,max_position_embeddings=128"),
    ("hf:biogpt", "hidden_size=64,num_hidden_layers=1,num_attention_heads=4,intermediate_size=128,vocab_size=512,"
                  "max_position_embeddings=128")])
def test_learned_position_embeddings_at_an_offset_are_placed(tmp_path, spec, config):
    """OPT's and BioGPT's learned position embeddings compute their ids (position ids + an
    offset of 2) and hand them to ``super().forward``: not placeable until 2026-12-07 (their
    gather 1.1-1.3% of hf:biogpt at hidden 64, 2x64 tokens); the op goes where that call leads since."""
    patched = placed_and_matching(tmp_path, spec, config, [2, 16], kinds=("embedding",))
    positions = next(name for name, _ in patched._autokernel_replaced if name.endswith("embed_positions"))
    assert type(patched.get_submodule(positions)).__name__.startswith("Autokernel")


def test_a_norm_of_another_dtype_than_the_runs_is_skipped_for_its_dtype(tmp_path):
    """New-user trial: an fp32 run applied to a bf16 model skipped the residual LayerNorms as
    "LayerNorm is not a plain norm of the kind"; the plain norms said the dtype, as it is."""
    from autokernel.integrate import apply

    loaded = load_model("gpt2", input_shape=[1, 8], dtype=torch.float32, config_overrides={"n_layer": "2"})
    (_,) = starters_workdir(tmp_path, profile_model(loaded, warmup=0, iters=1), ("add_layernorm",))
    with pytest.warns(UserWarning):
        patched = apply(loaded.model.to(torch.bfloat16), tmp_path)
    reasons = [why for _, why in patched._autokernel_skipped if "no place in the model" not in why]
    assert reasons and not any("not a plain norm" in why for why in reasons), reasons
    assert all("torch.bfloat16 is not the kernel's torch.float32" in why for why in reasons), reasons


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("spec,config,kind", [
    ("hf:mistral", "", "attention"),
    ("hf:qwen2", ",use_sliding_window=True,sliding_window=8,max_window_layers=0", "attention_masked")])
def test_attention_of_layers_that_pass_a_sliding_window_runs_our_kernel(tmp_path, spec, config, kind):
    """Mistral's and Qwen2's attention calls pass ``sliding_window`` to transformers' SDPA
    function, which takes the window from the mask alone: every such call went back to
    transformers (Mistral's attention op was installed and never called).  A probe of the
    function now shows which keywords it leaves unused (``sdpa_ignores``)."""
    from autokernel.integrate.ops import OP_CALLS

    before = dict(OP_CALLS)
    patched = placed_and_matching(tmp_path, spec, "hidden_size=64,intermediate_size=128,num_hidden_layers=2,"
                                  "num_attention_heads=4,num_key_value_heads=2,vocab_size=256" + config, [2, 16],
                                  kinds=(kind,))
    (op,) = patched._autokernel_ops.values()
    assert OP_CALLS[op] - before.get(op, 0) == 2  # both layers


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_the_sdpa_probe_takes_a_keyword_as_unused_only_where_the_output_does_not_move():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from autokernel.integrate.calls import sdpa_ignores

    def applies_both(module, q, k, v, mask, dropout=0.0, scaling=None, sliding_window=None, softcap=None, **kw):
        out = sdpa_attention_forward(module, q, k, v, mask, dropout=dropout, scaling=scaling)[0]
        return (out * (sliding_window or 1) + (softcap or 0)), None

    assert "sliding_window" in sdpa_ignores(sdpa_attention_forward)
    assert sdpa_ignores(applies_both) == frozenset()


MPT = "d_model=64,n_heads=4,n_layers=2,max_seq_len=64,vocab_size=256"
BLOOM = "hidden_size=64,n_layer=2,n_head=4,vocab_size=256"
NEO = dict(hidden_size=64, num_layers=2, num_heads=4, vocab_size=256, attention_types=[[["global", "local"], 1]],
           window_size=8)
DEBERTA = "hidden_size=64,num_hidden_layers=2,num_attention_heads=4,intermediate_size=128,vocab_size=256"
# attention written out in a forward or a method it calls, no kind placed it before; the position
# bias, the fills and the mask become one additive mask for the attention_masked op
# (``integrate.scores_attention``), and in training the module's own code runs (dropout):
# - MptAttention: scores times the scale, + the ALiBi bias, masked_fill with the causal mask, fp32
#   softmax, dropout, @ v (58-65% of hf:mpt's time);
# - BloomAttention: alibi.baddbmm(q, k^T) on heads folded into the batch, viewed as [B, H, S, S]
#   for the causal mask, the weights viewed back for torch.bmm (q, k, v [B, H, S, D] for the op);
# - GPTNeoSelfAttention._attn: fp32 scores unscaled, torch.where with the causal or window mask,
#   + the mask, softmax, @ v;
# - DisentangledSelfAttention (relative attention off): bmm(q, k^T / scale) on folded heads,
#   viewed as [B, H, S, S], masked_fill, softmax, bmm with v
WRITTEN_OUT = [
    ("hf:mpt", MPT, "model.transformer.blocks.{}.attn"),
    ("hf:bloom", BLOOM, "model.transformer.h.{}.self_attention"),
    ("hf:gpt_neo", NEO, "model.transformer.h.{}.attn.attention"),
    ("hf:deberta-v2", DEBERTA, "model.deberta.encoder.layer.{}.attention.self"),
]


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("spec,config,attention", WRITTEN_OUT, ids=[w[0] for w in WRITTEN_OUT])
def test_written_out_attention_is_placed_and_matches(tmp_path, spec, config, attention):
    from autokernel.integrate.ops import OP_CALLS

    before = dict(OP_CALLS)
    patched = placed_and_matching(tmp_path, spec, config, [2, 16], kinds=("attention_masked",))
    (op,) = patched._autokernel_ops.values()
    assert OP_CALLS[op] - before.get(op, 0) == 2  # one call a layer
    assert sorted(patched._autokernel_replaced) == [(attention.format(i), "attention_masked") for i in range(2)]
    calls = OP_CALLS[op]
    patched.train()
    with torch.no_grad():
        patched(*load_model(spec, config_overrides=config, input_shape=[2, 16]).make_inputs(2))
    assert OP_CALLS[op] == calls  # dropout: the original code


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("spec,config,attention", WRITTEN_OUT, ids=[w[0] for w in WRITTEN_OUT])
def test_written_out_attention_in_bf16_on_a_padded_batch(tmp_path, spec, config, attention):
    """bf16 scores plus an fp32 bias (MPT's ALiBi) make an fp32 mask; BLOOM's alibi differs per row
    (built from the padding mask); the mask hides the padding too.  GPT-Neo casts q and k to fp32
    in _attn whatever the model's dtype and the weights back to v's: its problem is fp32 (as
    profiled), v goes to the op in fp32 and its output back to bf16."""
    from autokernel.integrate import apply
    from autokernel.integrate.ops import OP_CALLS

    loaded = load_model(spec, config_overrides=config, input_shape=[3, 16], dtype=torch.bfloat16, padded=True)
    (problem,) = starters_workdir(tmp_path, profile_model(loaded, warmup=0, iters=1), ("attention_masked",))
    assert problem.dtype == ("fp32" if spec == "hf:gpt_neo" else "bf16")
    patched = apply(loaded.model, tmp_path)
    (op,) = patched._autokernel_ops.values()
    before = OP_CALLS.get(op, 0)
    with torch.no_grad():
        x = loaded.make_inputs(1)
        ref, out = loaded.model(*x).float(), patched(*x).float()
    assert OP_CALLS[op] - before == 2
    assert ((out - ref).norm() / ref.norm()).item() < 2e-2


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_bloom_with_all_its_kinds_placed_matches(tmp_path):
    """The attention's rewrite and the residual add ending the same forward (dropout_add, fused
    ahead into post_attention_layernorm) compose; BloomGelu after dense_h_to_4h is linear_gelu."""
    patched = placed_and_matching(tmp_path, "hf:bloom", BLOOM, [2, 16],
                                  kinds=("attention_masked", "linear_gelu", "add_layernorm", "layernorm", "embedding"))
    assert {(f"model.transformer.h.{i}.{m}", kind) for i in range(2)
            for m, kind in (("self_attention", "attention_masked"), ("mlp", "linear_gelu"),
                            ("post_attention_layernorm", "add_layernorm"))} <= set(patched._autokernel_replaced)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_nemotron_layernorm1p_norms_are_placed_and_match(tmp_path):
    """NemotronLayerNorm1P is an ``nn.LayerNorm`` subclass whose own forward scales by ``1 + w``:
    planned as layernorm and add_layernorm, and unplaceable before 2026-12-06 (7.3% and 1.0% of
    hf:nemotron not covered); ``apply`` probes its forward, w then 1 + w, and hands the op w + 1."""
    patched = placed_and_matching(tmp_path, "hf:nemotron", "hidden_size=64,num_hidden_layers=2,num_attention_heads=4,"
                                  "intermediate_size=128,vocab_size=256,num_key_value_heads=2", [2, 16],
                                  kinds=("layernorm", "add_layernorm"))
    replaced = dict(patched._autokernel_replaced)
    assert replaced["model.model.layers.0.post_attention_layernorm"] == "add_layernorm"
    assert replaced["model.model.norm"] == "add_layernorm"  # the last layer's end, fused ahead
    assert replaced["model.model.layers.0.input_layernorm"] == "layernorm"


class _NormBlock(torch.nn.Module):
    """An nn.LayerNorm child (switched) and an F.layer_norm in the block's own forward (no place)."""

    def __init__(self, d=32):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.w, self.b = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.nn.functional.layer_norm(self.norm(x) * 2, (x.shape[-1],), self.w, self.b)


class _NormNet(_NormBlock):
    """The block, then an F.layer_norm in the model's own forward (the root module's; no place)."""

    def __init__(self, d=32):
        super().__init__(d)
        self.block = _NormBlock(d)

    def forward(self, x):
        return torch.nn.functional.layer_norm(self.block(x) * 2, (x.shape[-1],), self.w, self.b)


def test_a_share_counts_as_placed_only_where_that_module_is_switched():
    """The check counted a problem's share at a module as placed when a module inside it or
    around it was switched for the same kind: the block's F.layer_norm (which apply cannot place)
    because its nn.LayerNorm child was switched; hf:whisper's stems (conv + F.gelu in the
    encoder's forward, 11.9% of it) with their applier switched off, because the encoder's
    layers were switched for linear_gelu.  The root module's own share (the model's
    F.layer_norm here) was never checked at all: its qualname is empty and the profiler recorded
    it under no module."""
    from autokernel.models import LoadedModel

    loaded = LoadedModel(model=_NormNet().eval(),
                         make_inputs=lambda seed: (torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(seed)),),
                         spec="test", description="test", input_shape=[2, 8, 32], input_kind="float")
    plan = profile_model(loaded, warmup=0, iters=1)
    norm = next(p for p in plan.problems if p.kind == "layernorm")
    assert norm.supported and norm.modules == ["block.norm", "block"], norm.modules
    assert set(norm.module_time_us) == {"block.norm"}, norm.module_time_us
    assert norm.time_us == pytest.approx(norm.module_time_us["block.norm"])
    assert "not placeable at block, the model's own forward:" in norm.note, norm.note
    assert any(u.name.startswith(f"{norm.name} (layernorm) at block and 1 more") and u.time_us > 0
               for u in plan.not_covered), [u.name for u in plan.not_covered]
    assert plan.covered_fraction + sum(u.fraction for u in plan.not_covered) == pytest.approx(1.0, abs=1e-6)


def test_the_models_own_forward_gets_its_gelu_rewritten(tmp_path):
    """The example BERT's head calls F.gelu in Bert.forward, the root module's (qualname ""):
    the call applier picked no op for the root, and that GELU (3.2-3.7% of the model) stayed
    PyTorch's while the placement check, which did not see the root's share, counted it as
    covered.  The profiler records that share under "" now; apply rewrites the root's call."""
    patched = placed_and_matching(tmp_path, "bert", None, [2, 16], kinds=("gelu",))
    replaced = dict(patched._autokernel_replaced)
    assert replaced == {"": "gelu", "layers.0.mlp": "gelu", "layers.1.mlp": "gelu"}, replaced
    gelu = json.loads((tmp_path / "plan.json").read_text())["problems"][0]
    assert gelu["kind"] == "gelu" and gelu["module_time_us"][""] > 0 and "" not in gelu["modules"]


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("spec,config,rotated", [
    ("hf:gpt_neox", "hidden_size=64,num_hidden_layers=1,num_attention_heads=2,intermediate_size=128,vocab_size=256", 8),
    ("hf:nemotron", "hidden_size=64,num_hidden_layers=1,num_attention_heads=2,num_key_value_heads=2,"
                    "intermediate_size=128,vocab_size=256", 16)])
def test_a_partial_rotary_done_inside_the_function_runs_through_the_op(tmp_path, spec, config, rotated):
    """GPT-NeoX's (and Nemotron's) apply_rotary_pos_emb gets tables as wide as the rotary dims
    and splits the heads itself (q[..., :rotary_dim]).  It was a rotary problem, placed by
    rebinding the function, but the replacement handed every such call back to PyTorch (the op
    took tables as wide as x): none ran, and 6-9% of those models counted as covered.  The op
    gets the rotated dims now (the rest passed through), and the plan's shapes are theirs."""
    from autokernel.integrate import OP_CALLS, apply

    from test_integrate import make_workdir, rel

    torch.manual_seed(0)
    loaded = load_model(spec, config_overrides=config, input_shape=[1, 16], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    rotary = next(p for p in plan.problems if p.kind == "rotary")
    assert rotary.supported and {s["D"] for s in rotary.shapes} == {rotated}, rotary.shapes  # of head_dim 32
    assert f"partial: the first {rotated} of 32 dims" in rotary.note
    patched = apply(loaded.model, make_workdir(tmp_path / "wd", [rotary], model=spec, input_shape=(1, 16)))
    op = patched._autokernel_ops[rotary.name]
    ids = torch.randint(0, 256, (1, 16))
    before = OP_CALLS[op]
    with torch.no_grad():
        out, ref = patched(ids), loaded.model(ids)
    assert OP_CALLS[op] - before == 2  # q and k of the layer
    assert rel(out, ref) < 1e-5
