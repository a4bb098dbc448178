"""Red-team pass on the numerics of the row-wise and attention kinds (CPU, Triton interpreter):
kernel files that passed ``autokernel bench`` while computing something other than the
reference for valid inputs, and what catches them now (each evaluation test here failed before
its fix)."""
from __future__ import annotations

import sys
from pathlib import Path

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
