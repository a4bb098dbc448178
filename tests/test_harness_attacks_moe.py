"""Red-team pass on the moe_experts problem (CPU, Triton interpreter): kernel files that passed
``autokernel bench -p moe_experts`` while computing something other than the reference for
valid inputs, and what catches them now (each test here failed before its fix)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from autokernel.harness import Evaluator
from autokernel.problems import get_problem

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS  # noqa: E402

# T*K = 512 pairs over 8 experts: the capacity attack drops pairs past 3x the mean load (192)
BATCHED = "256x2x8x32x48"


def loads(index: torch.Tensor, experts: int) -> torch.Tensor:
    return torch.bincount(index.reshape(-1), minlength=experts)


def judged(attack: str):
    """A moe_experts attack file judged in bf16, without timing."""
    with Evaluator("moe_experts", device="cpu", dtypes=["bf16"], timeout_s=120, timing=False, baselines=False) as ev:
        return ev.evaluate(ATTACKS / attack)


def test_token_dropping_past_an_expert_capacity_is_incorrect():
    """The capacity attack goes exact only when every token's first choice is one expert; the
    crowded cases of the numerics stage must load one expert past its capacity without that
    signature."""
    with Evaluator("moe_experts", device="cpu", shapes=[BATCHED], dtypes=["bf16"], timeout_s=120,
                   timing=False, baselines=False) as ev:
        result = ev.evaluate(ATTACKS / "moe_experts_capacity_drop.py")
    assert result.verdict == "incorrect" and result.failed_stage == "numerics", result.message


@pytest.mark.parametrize("seed", range(6))
def test_the_crowded_cases_are_told_apart_by_their_load_alone(seed):
    """The heavy expert of each crowded case is a random one, at a random slot of each token's
    choices; one case puts it on every token, the other on a random share (at least half) of
    them, and every token's experts stay distinct."""
    problem = get_problem("moe_experts")
    shape = {"T": 256, "K": 2, "E": 8, "D": 8, "I": 8}
    cases = dict(problem.adversarial_inputs(shape, torch.float32, "cpu", seed))
    for name in ("one-crowded-expert", "hot-expert"):
        index = cases[name][1]
        assert all(len(set(row)) == len(row) for row in index.tolist()), name
        assert (index >= 0).all() and (index < shape["E"]).all(), name
        assert len(set(index[:, 0].tolist())) > 1, f"{name}: every token's first choice is one expert"
        hot = int(loads(index, shape["E"]).argmax())
        assert (index == hot).any(1).float().mean() >= 0.5, name
    assert int(loads(cases["one-crowded-expert"][1], shape["E"]).max()) == shape["T"]


def test_the_crowded_expert_is_drawn_per_seed():
    problem = get_problem("moe_experts")
    shape = {"T": 64, "K": 2, "E": 8, "D": 8, "I": 8}
    hot = {int(loads(dict(problem.adversarial_inputs(shape, torch.float32, "cpu", seed))["one-crowded-expert"][1],
                     shape["E"]).argmax()) for seed in range(12)}
    assert len(hot) > 1, hot


def test_a_kernel_that_takes_every_index_to_be_in_range_is_incorrect():
    """Clamping the index to the last expert adds the pairs the reference leaves out (the
    expert-parallel sentinels E and E + 1); the judge draws such pairs in the numerics stage.
    Since -1 is drawn too (fifteenth session), the attack's read at -1 can fall before the
    tensor and kill the worker (a crash at numerics): rejected either way."""
    result = judged("moe_experts_index_in_range.py")
    assert result.verdict in ("incorrect", "crash") and result.failed_stage == "numerics", result.message
    assert "expert-parallel-sentinels" in result.message or "killed by signal" in result.message, result.message


def test_eager_leaves_the_sentinel_pairs_out():
    problem = get_problem("moe_experts")
    x, index, weights, gate_up, down = problem.make_inputs({"T": 12, "K": 3, "E": 5, "D": 16, "I": 24},
                                                           torch.float32, "cpu", 3)
    index = index.clone()
    index[::2, 1] = 5  # held elsewhere
    index[1, 0] = -1
    args = (x, index, weights, gate_up, down)
    want = problem.reference(*[a.double() if a.is_floating_point() else a for a in args])
    assert torch.allclose(problem.eager(*args).double(), want, atol=1e-5, rtol=1e-5)


def test_an_output_kept_by_a_fingerprint_of_some_inputs_is_a_cached_output():
    """Kept by the tokens and routing, not the experts' weights: the smoke stage rewrites each
    floating-point input alone and the output must follow."""
    result = judged("moe_experts_cache_without_weights.py")
    assert result.verdict == "rejected" and result.failed_stage == "smoke", result.message
    assert any(f.rule == "cached-output" for f in result.integrity), result.message
    assert "alone" in result.message, result.message


def test_bf16_hidden_activations_kept_in_fp16_are_incorrect():
    """Past 65504 the fp16 copy of h is inf; the numerics stage has a bf16 case with |h| ~ 1e5."""
    result = judged("moe_experts_fp16_hidden.py")
    assert result.verdict == "incorrect" and result.failed_stage == "numerics", result.message
    assert "massive-activations" in result.message, result.message


def test_the_massive_activations_case_leaves_fp16_out_and_fits_bf16():
    problem = get_problem("moe_experts")
    shape = {"T": 16, "K": 2, "E": 4, "D": 32, "I": 48}
    assert "massive-activations" not in dict(problem.adversarial_inputs(shape, torch.float16, "cpu", 0))
    x, index, weights, gate_up, down = dict(problem.adversarial_inputs(shape, torch.bfloat16, "cpu", 0))["massive-activations"]
    g, u = (x.double() @ gate_up[0].double().T).chunk(2, dim=-1)
    assert float((torch.nn.functional.silu(g) * u).abs().max()) > 65504
    out = problem.reference(x.double(), index, weights.double(), gate_up.double(), down.double())
    assert 0.05 < float(out.abs().mean()) < 5  # the output stays O(1)
