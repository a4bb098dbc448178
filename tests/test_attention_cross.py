"""attention_cross: non-causal attention whose query and key lengths differ (an encoder-decoder's
cross-attention), on CPU under the Triton interpreter: the reference against SDPA, the starter at
every shape and case, the floors; the profiler plans Whisper's cross-attention (hf:whisper feeds
its encoder and decoder sequences of their own lengths) as this kind, and ``apply`` places it,
the patched model's output the original's; BART's and T5's cross-attention, with an encoder
padding mask or none and a decoder shorter than the encoder, takes the op (with the mask)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.problems import get_problem  # noqa: E402
from autokernel.problems.registry import load_starter  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

HF = importlib.util.find_spec("transformers") is not None
KIND = "attention_cross"
SMALL_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}


def _cases(problem, shape, dtype, seed):
    yield "draw", problem.make_inputs(dict(shape), dtype, "cpu", seed)
    yield from problem.adversarial_inputs(dict(shape), dtype, "cpu", seed)


def _fp64(args):
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def test_reference_is_sdpa():
    """The reference is SDPA's math, kv heads repeated, the mask bool or added, at every CPU shape
    (fully masked rows aside: SDPA's math backend gives NaN there, the problem zeros, as its fused
    backends give)."""
    problem = get_problem(KIND)
    checked = 0
    for shape in problem.cpu_shapes + problem.cpu_edge_shapes:
        for seed in range(4):
            for name, args in _cases(problem, shape, torch.float32, seed):
                if "masked-rows" in name:
                    continue
                q, k, v, mask, scale = _fp64(args)
                group = q.shape[1] // k.shape[1]
                want = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                                      attn_mask=None if mask is None else mask.double()
                                                      if mask.dtype != torch.bool else mask, scale=scale)
                got = problem.reference(q, k, v, mask, scale)
                # an additive mask is summed through fp32 in the reference (attention_masked.with_mask)
                bound = 1e-4 if mask is not None and mask.dtype != torch.bool else 1e-10
                assert torch.allclose(got, want, atol=bound), (shape, name)
                checked += 1
    assert checked > 100


def test_shapes_cover_the_cases_the_kind_is_for():
    """Query and key lengths differ at every shape; among the CPU shapes: a single query (a
    decoding step), a single key, keys past two of the widest key block and not a multiple of
    any block, grouped kv heads, and each mask form."""
    problem = get_problem(KIND)
    shapes = problem.cpu_shapes + problem.cpu_edge_shapes
    assert all(s["Sq"] != s["Sk"] for s in shapes + problem.gpu_shapes + problem.gpu_edge_shapes)
    assert any(s["Sq"] == 1 for s in shapes) and any(s["Sk"] == 1 for s in shapes)
    assert any(s["Sk"] > 256 and s["Sk"] % 16 for s in shapes)
    assert any(s["Hkv"] < s["H"] for s in shapes)
    forms = {(s["masked"], s["additive"], s["per_query"]) for s in shapes}
    assert {(0, 0, 0), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)} <= forms
    assert all(problem.check_shape(s) is None for s in shapes)
    assert problem.check_shape({**shapes[0], "masked": 0, "additive": 1}) is not None


def test_floors_count_each_tensor_once_and_both_products():
    problem = get_problem(KIND)
    shape = {"B": 2, "H": 8, "Hkv": 2, "Sq": 5, "Sk": 300, "D": 64, "masked": 0, "additive": 0, "per_query": 0}
    assert problem.flops(shape) == 4 * 2 * 8 * 5 * 300 * 64
    assert problem.bytes(shape, torch.bfloat16) == (2 * 2 * 8 * 5 * 64 + 2 * 2 * 2 * 300 * 64) * 2
    bool_keys = dict(shape, masked=1)
    assert problem.bytes(bool_keys, torch.bfloat16) - problem.bytes(shape, torch.bfloat16) == 2 * 300
    additive_rows = dict(shape, masked=1, additive=1, per_query=1)
    assert problem.bytes(additive_rows, torch.float32) - problem.bytes(shape, torch.float32) == 2 * 5 * 300 * 4


def test_starter_matches_at_every_case_with_small_blocks():
    """16-row query tiles and 16-key blocks: several tiles and a partial last key block at every
    shape (the judge runs the knobs as shipped).  Past 256 keys the key block is the widest that
    still leaves two full blocks before the partial one (128: 263, 261 and 300 keys), the same
    several blocks and partial last one in fewer interpreted steps."""
    problem = get_problem(KIND)
    kernel = load_starter(KIND)
    for shape in problem.cpu_shapes + problem.cpu_edge_shapes:
        block_n = max([16] + [b for b in kernel.KNOB_SPACE["BLOCK_N"] if shape["Sk"] > 2 * b])
        assert shape["Sk"] <= 16 or (shape["Sk"] > block_n and shape["Sk"] % block_n), shape
        for name, args in _cases(problem, shape, torch.float32, 1):
            got = kernel.attention_cross(*args, knobs=dict(SMALL_BLOCKS, BLOCK_N=block_n))
            want = problem.reference(*_fp64(args))
            assert got.shape == args[0].shape and torch.allclose(got.double(), want, atol=2e-5), (shape, name)


# ------------------------------------------------------------------ the profiler plans it, apply places it
WHISPER = ("d_model=64,encoder_layers=1,decoder_layers=1,encoder_attention_heads=4,decoder_attention_heads=4,"
           "encoder_ffn_dim=128,decoder_ffn_dim=128,vocab_size=256,max_source_positions=32,max_target_positions=48")


@pytest.fixture(scope="module")
def whisper():
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    loaded = load_model("hf:whisper", config_overrides=WHISPER, dtype=torch.float32)
    return loaded, profile_model(loaded, warmup=0, iters=1)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_whisper_plans_its_cross_attention(whisper):
    """The decoder's 48 queries against the encoder's 32 states: one supported attention_cross
    problem at the decoder's encoder_attn, no SDPA left uncovered for differing lengths."""
    loaded, plan = whisper
    cross = [p for p in plan.problems if p.kind == KIND]
    assert len(cross) == 1 and cross[0].supported, [(p.kind, p.supported) for p in plan.problems]
    assert cross[0].modules == ["model.model.decoder.layers.0.encoder_attn"]
    assert cross[0].shapes == [{"B": 2, "H": 4, "Hkv": 4, "Sq": 48, "Sk": 32, "D": 16,
                                "masked": 0, "additive": 0, "per_query": 0}]
    assert not any("lengths differ" in u.name for u in plan.not_covered), [u.name for u in plan.not_covered]


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_apply_places_whispers_cross_attention(whisper, tmp_path):
    """Patched with the attention and attention_cross starters, the model gives the original's
    logits; the cross op runs once a forward (one decoder layer), the self-attention op three
    times (the encoder's layer, the decoder's)."""
    from autokernel.integrate import OP_CALLS, apply
    from test_integrate import make_workdir

    loaded, plan = whisper
    problems = [p for p in plan.problems if p.kind in (KIND, "attention")]
    assert {p.kind for p in problems} == {KIND, "attention"}
    patched = apply(loaded.model, make_workdir(tmp_path / "wd", problems, model="hf:whisper",
                                               input_shape=loaded.input_shape))
    assert ("model.model.decoder.layers.0.encoder_attn", KIND) in patched._autokernel_replaced
    ops = {p.kind: patched._autokernel_ops[p.name] for p in problems}
    before = {kind: OP_CALLS[op] for kind, op in ops.items()}
    inputs = loaded.make_inputs(0)
    with torch.no_grad():
        got, want = patched(*inputs), loaded.model(*inputs)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()
    assert OP_CALLS[ops[KIND]] - before[KIND] == 1
    assert OP_CALLS[ops["attention"]] - before["attention"] == 2


BART = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=128, max_position_embeddings=64)
T5 = dict(d_model=32, num_layers=1, num_heads=4, d_ff=64, d_kv=8, vocab_size=128)
# where each model's cross-attention lives, and the mask SDPA gets there: BART's padding mask
# ([B,1,1,Sk] bool, or expanded per query), T5's bias (zeros for cross-attention) and padding as one
# additive [B,H,Sq,Sk] mask
SEQ2SEQ = {"bart": ("BartConfig", BART, "model.decoder.layers.0.encoder_attn", None),
           "t5": ("T5Config", T5, "decoder.block.0.layer.1.EncDecAttention", (1, 1))}


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("arch", sorted(SEQ2SEQ))
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_seq2seq_cross_attention_of_other_lengths(arch, padded, tmp_path):
    """BART and T5 fed 20 encoder tokens (row 1 padded to 13, or no mask) and 7 decoder tokens:
    the profiler plans the cross-attention as attention_cross, with the mask SDPA gets where there
    is one, and the op takes it (with that mask), the output the original's."""
    import transformers

    from autokernel.integrate import OP_CALLS, apply
    from autokernel.models import LoadedModel
    from autokernel.plan import PlanProblem
    from autokernel.profiler import profile_model
    from test_integrate import make_workdir

    config_name, settings, module, additive_per_query = SEQ2SEQ[arch]
    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**settings, attn_implementation="sdpa", decoder_start_token_id=0,
                                                pad_token_id=0)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config).eval()
    ids = torch.randint(3, 128, (2, 20))
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[1, 13:] = 0
    mask = mask if padded else None
    decoder_ids = torch.randint(3, 128, (2, 7))
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits

    loaded = LoadedModel(model=model, make_inputs=lambda seed: (ids, mask, decoder_ids), spec="custom",
                         description=f"{arch}, 20 encoder and 7 decoder tokens", input_shape=[2, 20])
    plan = profile_model(loaded, warmup=0, iters=1)
    cross = [p for p in plan.problems if p.kind == KIND]
    assert len(cross) == 1 and cross[0].supported and cross[0].modules == [module]
    (shape,) = cross[0].shapes
    assert (shape["Sq"], shape["Sk"]) == (7, 20), shape
    if additive_per_query is not None:
        assert (shape["masked"], shape["additive"], shape["per_query"]) == (1, *additive_per_query), shape
    else:
        assert shape["masked"] == int(padded), shape
    problem = PlanProblem(KIND, KIND, "fp32", cross[0].shapes, [1], 100.0, 0.1, cross[0].modules)
    patched = apply(model, make_workdir(tmp_path / "wd", [problem], model="custom", input_shape=(2, 20)))
    op = patched._autokernel_ops[KIND]
    before = OP_CALLS[op]
    with torch.no_grad():
        got = patched(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    assert OP_CALLS[op] - before == 1
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()


def test_a_causal_call_of_differing_lengths_stays_pytorchs():
    """SDPA's causal mask with Sq != Sk is aligned top-left: not this kind's computation; the
    replacement hands such a call (and calls of equal lengths, with no other op) to PyTorch."""
    from autokernel.integrate.calls import _sdpa_replacement

    calls = []

    class Op:
        kind, dtype = KIND, torch.float32

        def op(self, *args):
            calls.append(args)
            return get_problem(KIND).reference(*args)

        def head_dims(self):
            return {(16, 16)}

    sdpa = _sdpa_replacement(None, None, Op())
    q, k = torch.randn(1, 2, 5, 16), torch.randn(1, 2, 9, 16)
    assert torch.allclose(sdpa(q, k, k), F.scaled_dot_product_attention(q, k, k), atol=1e-6)
    assert len(calls) == 1
    assert torch.equal(sdpa(q, k, k, is_causal=True), F.scaled_dot_product_attention(q, k, k, is_causal=True))
    assert torch.equal(sdpa(q, q, q), F.scaled_dot_product_attention(q, q, q))
    assert len(calls) == 1
