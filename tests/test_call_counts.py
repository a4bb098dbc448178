"""The placement check counts each placed problem's calls: the patched copy runs one forward with
a stand-in op per problem (the problem's eager op, counting its calls), and a problem whose op
takes fewer calls than planned does not count as covered there.

GPT-NeoX's and Nemotron's partial rotary counted as placed (apply rebound apply_rotary_pos_emb)
while the replacement handed every call back to PyTorch; found by hand, with a script that ran
each coverage model's copy with counting ops.  The profile runs that check now.
"""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.integrate.call_counts import EXTRA_CALLS, assign, shortfall  # noqa: E402
from autokernel.integrate.placement import check_placement, mark_placement, mark_short  # noqa: E402
from autokernel.integrate.selection import DECLINED  # noqa: E402
from autokernel.models import load_model  # noqa: E402
from autokernel.plan import Plan, PlanProblem  # noqa: E402
from autokernel.profiler import profile_model  # noqa: E402

HF = importlib.util.find_spec("transformers") is not None
NEOX = "hidden_size=64,num_hidden_layers=1,num_attention_heads=2,intermediate_size=128,vocab_size=256"


def _problem(**kw) -> PlanProblem:
    base = dict(name="p", kind="add_layernorm", dtype="fp32", shapes=[{"M": 8, "N": 16}], calls=[3], time_us=30.0,
                fraction=0.3)
    base.update(kw)
    return PlanProblem(**base)


def test_a_call_counts_for_the_plan_module_it_runs_in_or_whose_add_it_runs_ahead():
    """The add + norm of h.0.ln_2 runs in h.0's rewritten forward (the norm's parent), the add
    fused ahead into h.1.ln_1 at the end of h.0 (its ``add_from``), ln_f's at the end of h.1;
    a call inside a module (a switched norm) counts for it."""
    p = _problem(modules=["h.0.ln_2", "h.1.ln_1", "ln_f"], add_from={"h.1.ln_1": "h.0", "ln_f": "h.1"},
                 module_calls={"h.0.ln_2": [[0, 1.0]], "h.1.ln_1": [[0, 1.0]], "ln_f": [[0, 1.0]]})
    stacks = [("h.0",), ("h.0",), ("h.1",)]
    assert dict(assign(p, stacks, {m: 1.0 for m in p.module_calls})) == {"h.0.ln_2": 1, "h.1.ln_1": 1, "ln_f": 1}
    assert shortfall(p, stacks) is None
    # h.0's own add taken, the one fused ahead into h.1.ln_1 handed back: h.1.ln_1 (or h.0.ln_2, the
    # two run in one forward) is one call short; ln_f's call ran inside the norm itself
    gap = shortfall(p, [("h.0",), ("h.1", "ln_f")])
    assert gap is not None and gap.counted == 2 and gap.planned == 3
    assert list(gap.modules.values()) == [(1.0, 0)]


def test_the_same_kind_twice_in_a_module_counts_each_call():
    """A module whose forward rotates q and k: the plan expects two calls there; a switch that
    took one of them placed the module (time is attributed per module) but not the other call."""
    p = _problem(kind="rotary", modules=["attn"], module_calls={"attn": [[0, 2.0]]}, calls=[2],
                 module_time_us={"attn": 20.0}, time_us=20.0, fraction=0.2)
    assert shortfall(p, [("attn",), ("attn",)]) is None
    gap = shortfall(p, [("attn",)])
    assert gap is not None and gap.modules == {"attn": (2.0, 1)}
    plan = Plan(model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[1], total_time_us=100.0,
                problems=[p])
    mark_short(plan, p, gap)
    assert p.supported and p.time_us == pytest.approx(10.0) and p.fraction == pytest.approx(0.1)
    assert p.module_time_us == {"attn": pytest.approx(10.0)} and DECLINED in p.note and "attn 1 of 2" in p.note
    assert plan.covered_fraction + sum(u.fraction for u in plan.not_covered) == pytest.approx(0.2)  # none lost
    assert [u.name for u in plan.uncovered] == ["p (rotary) at attn, calls not taken"]


def test_modules_the_appliers_did_not_switch_are_not_counted_twice():
    p = _problem(modules=["a", "b"], module_calls={"a": [[0, 1.0]], "b": [[0, 2.0]]})
    assert shortfall(p, [("a",)], unplaced={"b"}) is None


def test_the_check_counts_every_call_of_the_example_models_ops():
    loaded = load_model("llama", input_shape=[1, 16], dtype=torch.float32, config_overrides={"n_layers": "2"})
    plan = profile_model(loaded, warmup=0, iters=1)
    check = check_placement(loaded.model, plan, loaded.make_inputs(0))
    assert not check.count_error and not check.short
    assert check.counted == {p.name: sum(p.calls) for p in plan.supported}, (check.counted, plan.supported)
    assert check.counted["rotary"] == 4  # q and k of each layer


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_a_placed_rotary_that_hands_every_call_back_does_not_count_as_covered(monkeypatch):
    """The partial rotary as it was before apply gave those calls to the op: the function rebound
    with the full-width replacement, which declines tables narrower than the heads."""
    from autokernel.integrate import calls

    monkeypatch.setattr(calls, "PARTIAL", object())  # no function is taken for a partial one
    loaded = load_model("hf:gpt_neox", config_overrides=NEOX, input_shape=[1, 16], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    rotary = next(p for p in plan.problems if p.kind == "rotary")
    assert not rotary.supported, rotary.note
    assert f"rotary: {DECLINED} (none of its 2 calls a forward" in rotary.note
    assert any(u.name.startswith(f"{rotary.name} (rotary, unsupported)") for u in plan.not_covered)
    assert plan.covered_fraction + sum(u.fraction for u in plan.not_covered) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_an_add_whose_sum_is_added_to_again_before_the_norm_is_not_fused():
    """RoBERTa's embeddings: ``x = ids + types; x = x + positions; x = LayerNorm(x)``.  Both adds
    were fused with the norm, the first one's normalised rows never used: the count found the
    add_layernorm op called 6 times a forward for 5 planned.  Only the add the norm reads is fused."""
    from test_models_coverage import SMALL_DECODER

    loaded = load_model("hf:roberta", config_overrides=SMALL_DECODER, input_shape=[2, 16], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    add_norm = next(p for p in plan.problems if p.kind == "add_layernorm")
    check = check_placement(loaded.model, plan, loaded.make_inputs(0))
    assert check.counted[add_norm.name] == sum(add_norm.calls) == 5, (check.counted, add_norm.module_calls)
    assert not check.extra and EXTRA_CALLS not in add_norm.note


def test_a_problem_whose_op_takes_more_calls_than_planned_says_so():
    """The plan's note says so (coverage as it was): RoBERTa's embeddings before the fix above."""
    loaded = load_model("llama", input_shape=[1, 16], dtype=torch.float32, config_overrides={"n_layers": "2"})
    plan = profile_model(loaded, warmup=0, iters=1)
    rotary = next(p for p in plan.problems if p.kind == "rotary")
    rotary.calls = [3]  # one call fewer than the model makes
    mark_placement(plan, loaded.model, loaded.make_inputs(0))
    assert rotary.supported and f"{EXTRA_CALLS}: 4 a forward, 3 planned" in rotary.note, rotary.note


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_a_check_does_not_take_the_classes_an_earlier_check_made_for_another_config():
    """The checks' stub ops have the same names from model to model, and the appliers keep their
    classes by what they switch: BLOOM profiled with 4 heads after BLOOM with 2 got the first
    one's attention class, which declined every call, and its attention_masked came out
    unsupported (the order of the tests decided it)."""
    for heads in (2, 4):
        loaded = load_model("hf:bloom", config_overrides=f"hidden_size=32,n_layer=1,n_head={heads},vocab_size=64",
                            input_shape=[1, 16], dtype=torch.float32)
        plan = profile_model(loaded, warmup=0, iters=1)
        masked = next(p for p in plan.problems if p.kind == "attention_masked")
        assert masked.supported and DECLINED not in masked.note, (heads, masked.note)
