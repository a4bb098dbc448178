"""From an evaluation to a results row: the keep/revert decision and the row's numbers.

Pure functions: ``decide`` (the status), ``speedup_vs_start`` (chained through paired
measurements), ``throughput`` (time-weighted GB/s or TFLOP/s) and ``make_record``."""
from __future__ import annotations

from . import figures
from .results import TIMEOUT_STAGE, ExperimentRecord, timed_out

FIRST_MEASURED = ("first measured kernel, not a gain: the starting kernel's evaluation timed out, nothing to "
                  "compare with")  # a keep's description after a timed-out start (``first_measured``)
COMPUTE_BOUND_INTENSITY = 32.0  # flop/byte above which throughput is reported in TFLOP/s
FAILURE_STATUSES = ("incorrect", "timeout", "crash", "rejected")


def decide(evaluation, *, incumbent_correct: bool, incumbent_us: float | None = None) -> str:
    """The experiment's status from its evaluation.  Incorrect, crashed, timed-out and rejected
    kernels are never kept; a correct one is kept when the incumbent is not correct, or when
    it beat the incumbent beyond the measured noise in the paired timing *and* its own score is
    below the incumbent's recorded score ``incumbent_us`` (so the best is never slower than
    the start by the figures everyone reads: ``loop.figures``)."""
    if evaluation.verdict == "slower":  # lost to the incumbent before the later stages ran
        return "revert"
    if not evaluation.correct or evaluation.verdict != "pass":
        return evaluation.verdict if evaluation.verdict in FAILURE_STATUSES else "incorrect"
    if not incumbent_correct:
        return "keep"
    comparison = evaluation.vs_incumbent
    if comparison is not None and comparison.significant and comparison.candidate_us < comparison.incumbent_us:
        if incumbent_us is not None and evaluation.score_us is not None and evaluation.score_us >= incumbent_us:
            return "revert"  # the machine drifted: faster in the pair, not on the recorded scores
        return "keep"
    return "revert"


def first_measured(baseline: ExperimentRecord | None, best: ExperimentRecord | None, status: str) -> bool:
    """Whether a ``keep`` is the first kernel measured after a starting kernel whose evaluation
    timed out: kept (the problem's first correct kernel), but no improvement on anything."""
    return (status == "keep" and (best is None or not best.correct) and baseline is not None
            and timed_out(baseline))


def speedup_vs_start(baseline: ExperimentRecord | None, evaluation, status: str) -> float | None:
    """This kernel against the starting kernel: the start's recorded score over this one's
    (``loop.figures``: one definition everywhere)."""
    if status == "baseline":
        return 1.0 if evaluation.correct and evaluation.score_us else None
    if baseline is None or not baseline.correct:
        return None
    return figures.vs_start(baseline.latency_us, evaluation.score_us)


def throughput(problem, evaluation) -> tuple[float | None, str]:
    """Time-weighted achieved throughput over the timed shapes, in TFLOP/s for compute-bound
    problems and GB/s otherwise; (None, "") when a shape lacks it."""
    timings = [t for t in evaluation.timings if t.latency_us]
    if not timings:
        return None, ""
    try:
        from ..problems.base import parse_dtype

        t0 = timings[0]
        intensity = problem.flops(t0.shape) / max(problem.bytes(t0.shape, parse_dtype(t0.dtype)), 1.0)
    except Exception:
        intensity = 0.0
    attr, unit = ("tflops", "TFLOP/s") if intensity >= COMPUTE_BOUND_INTENSITY else ("gbps", "GB/s")
    pairs = [(t.weight * t.latency_us, getattr(t, attr)) for t in timings if getattr(t, attr) is not None]
    if not pairs or len(pairs) != len(timings):
        return None, ""
    total = sum(w for w, _ in pairs)
    return (sum(w * v for w, v in pairs) / total if total > 0 else None), unit


def make_record(problem, name: str, baseline: ExperimentRecord | None, best: ExperimentRecord | None,
                experiment: int, agent_name: str, status: str, evaluation, wall_s: float, tokens: int,
                commit: str, description: str) -> ExperimentRecord:
    """The results row of one experiment (``evaluation`` None for a rejected proposal)."""
    rate, unit = (None, "")
    latency = pct = vs_eager = vs_start = None
    failed_stage = ""
    if evaluation is not None:
        # a timeout is no verdict on the kernel: the row says so, not the stage it was in
        # (the evaluation's file keeps that); readers took a baseline's stage for a failure
        failed_stage = TIMEOUT_STAGE if evaluation.verdict == "timeout" else evaluation.failed_stage or ""
        if (evaluation.correct or evaluation.verdict == "slower") and evaluation.score_us:
            latency = float(evaluation.score_us)
            rate, unit = throughput(problem, evaluation)
            pct = evaluation.pct_roofline
            vs_eager = figures.vs_eager(evaluation.eager_score_us, latency, evaluation.timing_kind)
            vs_start = speedup_vs_start(baseline, evaluation, status)
    if first_measured(baseline, best, status):
        description = f"{FIRST_MEASURED}: {description}"
    return ExperimentRecord(experiment=experiment, problem=name, agent=agent_name, status=status,
                            failed_stage=failed_stage, latency_us=latency, throughput=rate,
                            throughput_unit=unit, pct_roofline=pct, speedup_vs_eager=vs_eager,
                            speedup_vs_start=vs_start, wall_s=round(wall_s, 3), tokens=tokens, commit=commit,
                            description=description[:300])
