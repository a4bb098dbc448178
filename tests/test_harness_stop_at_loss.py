"""The loop's evaluation order (``Evaluator(stop_at_loss=True)``): with an incumbent, the pair is
timed right after smoke with no timed call's outputs compared (the screen); a candidate not faster
beyond the noise is reverted there (verdict ``slower``, five stages saved), and one that may be
kept is judged by every stage and by the checked timing, which alone decides.  The timing of a
pair stops early at a clear loss.

CPU (Triton interpreter), the reduce starter at one tiny shape."""
from __future__ import annotations

import os

import pytest
from reduce_edits import edited_reduce, slower_reduce

from autokernel.harness import Evaluation, Evaluator
from autokernel.loop.verdict import decide, make_record
from autokernel.problems.registry import KERNELS_DIR, get_problem

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

STARTER = KERNELS_DIR / "reduce.py"
ALL_STAGES = ["smoke", "sweep", "numerics", "determinism", "edges", "heldout"]


@pytest.fixture(scope="module")
def loop_evaluator():
    with Evaluator("reduce", device="cpu", shapes=["64x256"], dtypes=["fp32"], timeout_s=60, baselines=False,
                   stop_at_loss=True) as ev:
        yield ev


def test_a_slower_candidate_is_reverted_after_smoke_without_the_other_stages(tmp_path, loop_evaluator):
    ev = loop_evaluator.evaluate(slower_reduce(tmp_path), incumbent_file=STARTER)
    assert ev.verdict == "slower" and not ev.correct, ev.message
    assert [s.name for s in ev.stages] == ["smoke"] and ev.stages[0].passed
    assert "stages after smoke were not run" in ev.message and "timing stopped after" in ev.message
    assert not ev.vs_incumbent.significant and ev.vs_incumbent.median_ratio > 1.5
    assert len(ev.timings) == 1 and ev.score_us > 0
    # screened only: no timed call's outputs were compared, and no checked timing followed
    assert "stages" in ev.phases and "screen" in ev.phases
    assert "timing" not in ev.phases and "timing_checks" not in ev.phases
    assert decide(ev, incumbent_correct=True, incumbent_us=1.0) == "revert"
    row = make_record(get_problem("reduce"), "reduce", None, None, 1, "tuner", "revert", ev, ev.wall_s, 0, "abc",
                      "four times the work")
    assert row.latency_us == pytest.approx(ev.score_us) and row.failed_stage == ""
    assert Evaluation.from_json(ev.to_json()).verdict == "slower"


def test_a_faster_candidate_is_judged_by_every_stage_and_kept(tmp_path, loop_evaluator):
    ev = loop_evaluator.evaluate(STARTER, incumbent_file=slower_reduce(tmp_path))
    assert ev.verdict == "pass" and ev.correct, ev.message
    assert [s.name for s in ev.stages] == ALL_STAGES and all(s.passed for s in ev.stages)
    assert ev.message.startswith("passed 6 stages")
    assert ev.vs_incumbent.significant
    # screened, then timed again with the timed calls' outputs checked: that timing decides
    assert "screened against the incumbent first" in ev.message
    assert ev.phases["screen"] > 0 and ev.phases["timing"] > 0 and ev.phases["timing_checks"] > 0
    assert decide(ev, incumbent_correct=True, incumbent_us=ev.score_us * 2) == "keep"


def test_a_faster_candidate_wrong_past_smoke_is_incorrect_and_keeps_no_timings(tmp_path, loop_evaluator):
    """Right at the timed shape, wrong at every other width: timed first (and faster), then the
    stages find it out; its timings are dropped with the verdict."""
    wrong_elsewhere = edited_reduce(tmp_path, "reduce_wrong_elsewhere.py",
                                    "    if x.shape[-1] == 256:\n        return _kernel_once(x)\n"
                                    "    return _kernel_once(x[:, : max(1, x.shape[-1] - 1)])\n")
    ev = loop_evaluator.evaluate(wrong_elsewhere, incumbent_file=slower_reduce(tmp_path))
    assert ev.verdict == "incorrect" and ev.failed_stage not in (None, "smoke", "timing"), ev.message
    assert ev.timings == [] and ev.score_us is None and ev.vs_incumbent is None
    assert decide(ev, incumbent_correct=True) == "incorrect"


def test_without_an_incumbent_or_the_option_every_stage_runs_first(tmp_path):
    with Evaluator("reduce", device="cpu", shapes=["64x256"], dtypes=["fp32"], timeout_s=60, baselines=False,
                   stop_at_loss=True) as ev:
        alone = ev.evaluate(slower_reduce(tmp_path))
    assert alone.verdict == "pass" and [s.name for s in alone.stages] == ALL_STAGES
    with Evaluator("reduce", device="cpu", shapes=["64x256"], dtypes=["fp32"], timeout_s=60,
                   baselines=False) as ev:
        paired = ev.evaluate(slower_reduce(tmp_path), incumbent_file=STARTER)
    assert paired.verdict == "pass" and [s.name for s in paired.stages] == ALL_STAGES
    assert not paired.vs_incumbent.significant


def _screen_says(monkeypatch, significant: bool) -> list:
    """The first comparison of an evaluation (the screen's) says ``significant`` whatever it
    measured; every comparison is recorded as measured (a copy) in the list returned."""
    import copy

    real = Evaluator._comparison
    seen = []

    def patched(self, samples, n_cases, walls):
        comparison = real(self, samples, n_cases, walls)
        seen.append(copy.copy(comparison))
        if len(seen) == 1:
            comparison.significant = significant
        return comparison

    monkeypatch.setattr(Evaluator, "_comparison", patched)
    return seen


def test_the_keep_rests_on_the_checked_timing_never_on_the_screen(tmp_path, loop_evaluator, monkeypatch):
    """A screen that called a slower candidate faster (as a kernel cheating on the screen's
    unchecked calls would make it) only sends it on: the checked timing finds it slower."""
    seen = _screen_says(monkeypatch, significant=True)
    ev = loop_evaluator.evaluate(slower_reduce(tmp_path), incumbent_file=STARTER)
    assert [c.significant for c in seen] == [False, False]
    assert ev.verdict == "pass" and [s.name for s in ev.stages] == ALL_STAGES, ev.message
    assert not ev.vs_incumbent.significant and ev.vs_incumbent.median_ratio > 1.5
    assert decide(ev, incumbent_correct=True, incumbent_us=ev.vs_incumbent.incumbent_us) == "revert"


def test_a_clear_loss_stops_the_rounds_after_the_first(tmp_path, loop_evaluator, monkeypatch):
    """With enough calls a round for the fastest to mean something (8 here; the interpreter's plan
    makes one), a candidate whose fastest calls are slower than the incumbent's median by more
    than the margin is not timed further: one round of three."""
    from autokernel.harness import timing

    monkeypatch.setattr(timing, "CPU_PLAN", timing.TimingPlan(budget_s=1e3, min_calls=24, max_calls=24))
    ev = loop_evaluator.evaluate(slower_reduce(tmp_path), incumbent_file=STARTER)
    assert ev.verdict == "slower", ev.message
    assert "timing stopped after 1 of 3 interleaved rounds: the candidate's fastest calls" in ev.message
    assert not ev.vs_incumbent.significant


def test_a_gain_the_screens_noise_left_insignificant_still_reaches_the_checked_timing(tmp_path, loop_evaluator,
                                                                                       monkeypatch):
    """The screen passes a candidate whose median ratio is under 1 - MIN_GAIN even where its own
    rounds were too noisy for significance: the checked timing decides on samples of its own
    (two significance tests in a row kept a real gain with the square of one's power: CI once
    reverted a kernel twice as fast, tests/test_agent_llm.py)."""
    seen = _screen_says(monkeypatch, significant=False)
    ev = loop_evaluator.evaluate(STARTER, incumbent_file=slower_reduce(tmp_path))
    assert len(seen) == 2 and seen[0].median_ratio < 0.99
    assert ev.verdict == "pass" and ev.vs_incumbent.significant, ev.message
    assert [s.name for s in ev.stages] == ALL_STAGES
