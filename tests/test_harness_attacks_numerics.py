"""Red-team pass on the numerics of the row-wise and attention kinds (CPU, Triton interpreter):
kernel files that passed ``autokernel bench`` while computing something other than the
reference for valid inputs, and what catches them now (each evaluation test here failed before
its fix)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from autokernel.harness import Evaluator
from autokernel.problems import get_problem

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS  # noqa: E402


def judged(kind: str, attack: str):
    with Evaluator(kind, device="cpu", dtypes=["bf16"], timeout_s=120, timing=False, baselines=False) as ev:
        return ev.evaluate(ATTACKS / attack)


# ------------------------------------------------- paths only the edge (and held-out) shapes take
def test_a_wide_row_path_without_the_max_is_incorrect():
    """Rows past 512 stream exp(x) without the max: only the 1x1100 edge shape takes that path,
    and the edges stage draws the adversarial cases there now."""
    result = judged("softmax", "softmax_wide_rows_no_max.py")
    assert result.verdict == "incorrect" and result.failed_stage == "edges", result.message
    assert "1x1100" in result.message and "case=" in result.message, result.message


def test_an_odd_vocabulary_path_without_the_max_is_incorrect():
    """Odd vocabularies (the 3x37 edge, every held-out shape) drop the max; the targets are even."""
    result = judged("cross_entropy", "cross_entropy_odd_vocab_no_max.py")
    assert result.verdict == "incorrect" and result.failed_stage == "edges", result.message
    assert "3x37" in result.message and "case=" in result.message, result.message


def test_an_odd_vocabulary_path_without_the_max_fails_at_the_heldout_shapes_too():
    """Without the edge shapes, the held-out shapes (odd V) meet the adversarial draws."""
    problem = get_problem("cross_entropy")
    with Evaluator(problem, device="cpu", dtypes=["bf16"], timeout_s=120, timing=False, baselines=False) as ev:
        ev.problem.cpu_edge_shapes = ()
        result = ev.evaluate(ATTACKS / "cross_entropy_odd_vocab_no_max.py")
    assert result.verdict == "incorrect" and result.failed_stage == "heldout", result.message
    assert "case=" in result.message, result.message


# ------------------------------------------------------ a pivot kept from the first key block
@pytest.mark.parametrize("kind", ["attention", "attention_masked", "attention_rotary"])
def test_a_softmax_pivot_frozen_after_the_first_key_block_is_incorrect(kind):
    result = judged(kind, f"{kind}_frozen_max.py")
    assert result.verdict == "incorrect" and result.failed_stage == "numerics", result.message
    assert "rising-scores" in result.message, result.message


@pytest.mark.parametrize("kind,shape", [
    ("attention", {"B": 2, "H": 4, "Hkv": 2, "S": 40, "D": 32, "causal": 1}),
    ("attention_masked", {"B": 2, "H": 2, "Hkv": 2, "S": 24, "D": 16, "additive": 0, "per_query": 1}),
    ("attention_rotary", {"B": 1, "H": 2, "Hkv": 1, "S": 33, "D": 64, "causal": 0}),
])
@pytest.mark.parametrize("seed", range(3))
def test_rising_scores_put_the_best_key_late_and_far_above_the_first_block(kind, shape, seed):
    """The scores the kernel forms (after the rotation for attention_rotary): for many query rows
    the best visible key is more than 100 above the best of the first 16 keys (exp overflows
    fp32 past ~88), whichever scale the draw passes."""
    from autokernel.problems.attention import scaled_scores
    from autokernel.problems.rotary import reference as rotate

    problem = get_problem(kind)
    args = dict(problem.adversarial_inputs(shape, torch.bfloat16, "cpu", seed))["rising-scores"]
    q, k, v = (t.double() for t in args[:3])
    scale = args[-1]
    if kind == "attention_rotary":
        cos, sin = args[3].double(), args[4].double()
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    scores, _ = scaled_scores(q, k, v, scale)
    s = shape["S"]
    visible = torch.ones(s, s, dtype=torch.bool)
    if kind == "attention_masked":
        visible = args[3].expand(shape["B"], shape["H"], s, s)
    elif shape["causal"]:
        visible = visible.tril()
    scores = scores.masked_fill(~visible, -math.inf)
    gap = scores.amax(-1) - scores[..., :16].amax(-1)
    assert (gap[torch.isfinite(gap)] > 100).float().mean() > 0.25
    out = problem.reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                              for a in args])
    assert torch.isfinite(out).all()


# --------------------------------------------------------- a dtype only the held-out shapes meet
def test_fp32_rounded_to_bf16_on_a_longer_ragged_k_is_incorrect():
    """Only the held-out shapes near K = 64 take the path; they run at every dtype now."""
    with Evaluator("matmul", device="cpu", timeout_s=120, timing=False, baselines=False) as ev:
        result = ev.evaluate(ATTACKS / "matmul_fp32_ragged_k_as_bf16.py")
    assert result.verdict == "incorrect" and result.failed_stage == "heldout", result.message
    assert "dtype=fp32" in result.message, result.message


# ------------------------------------------------------------------ -inf logits in cross_entropy
def test_lane_maxima_starting_at_minus_inf_are_incorrect():
    """A lane whose logits are all -inf forms exp(-inf - -inf) = NaN; the numerics stage masks
    about half the vocabulary now."""
    result = judged("cross_entropy", "cross_entropy_lane_max_from_minus_inf.py")
    assert result.verdict == "incorrect" and result.failed_stage == "numerics", result.message
    assert "masked-inf" in result.message, result.message


def test_the_masked_vocabulary_keeps_every_counted_loss_finite():
    problem = get_problem("cross_entropy")
    for seed in range(4):
        logits, targets, ignore_index = dict(problem.adversarial_inputs({"M": 16, "V": 40}, torch.float32, "cpu",
                                                                         seed))["masked-inf"]
        masked = torch.isinf(logits)
        assert 0.3 < masked.float().mean() < 0.6 and not masked[:, 0].any()
        counted = (targets != ignore_index).nonzero().flatten()
        assert not masked[counted, targets[counted]].any()
        assert torch.isfinite(problem.reference(logits.double(), targets, ignore_index))
