"""What the loop prints while it runs: one line per experiment, and what every slot is doing."""
from __future__ import annotations

import math
import time

from ..harness.records import Comparison
from .budget import format_duration
from .results import ExperimentRecord


class Printer:
    def __init__(self, enabled: bool, console=None):
        self.enabled = enabled
        if enabled and console is None:
            from rich.console import Console

            console = Console(highlight=False, soft_wrap=True)
        self.console = console

    def line(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, markup=False)


def progress_line(run, record: ExperimentRecord, deadline: float | None,
                  comparison: Comparison | None = None) -> str:
    """One line per experiment.  A candidate's own score and the best's were measured at
    different times; the keep/revert decision rests on the paired comparison, so that is shown
    too ("vs best 1.03x ±8%")."""
    best = run.best_row
    best_text = f"{best.latency_us:.4g} us" if best is not None and best.latency_us else "none correct"
    if best is not None and best.speedup_vs_start and best.status == "keep":
        best_text += f" ({best.speedup_vs_start:.3g}x)"
    latency = f"{record.latency_us:.4g} us" if record.latency_us else (record.failed_stage or "-")
    kept = sum(1 for r in run.rows if r.status == "keep")
    left = f"  left {format_duration(deadline - time.monotonic())}" if deadline is not None else ""
    paired = ""
    if comparison is not None and comparison.candidate_us > 0:
        beside = beside_text(comparison, best.latency_us if best is not None else None)
        paired = f" (vs best {ratio_text(comparison.decision_speedup)} ±{100 * comparison.noise_frac:.0f}%{beside})"
        if record.status == "revert":
            paired += revert_reason(comparison)
            if (not beside and comparison.decision_speedup <= 1.0 and record.latency_us and best is not None
                    and best.latency_us and record.latency_us < best.latency_us):
                paired += "; side by side it was slower (its own score, timed apart from the best's, reads lower)"
    return (f"{run.name} exp {record.experiment:>3} {record.status:<9} {latency + paired:<12} best {best_text}  "
            f"kept {kept}{left}  {record.description}")


def beside_text(comparison: Comparison, best_us: float | None, apart: float = 1.5) -> str:
    """``, the best took 1.375e+05 us beside it``: where the best's time in the pair is more than
    ``apart`` times off its recorded score (a busier or quieter machine then), so that the
    candidate's own score and the best's, timed apart, do not read as the comparison
    (a new user saw "1.019e+05 us (vs best 0.995x) best 1.92e+04 us")."""
    paired_us = comparison.incumbent_us
    if not best_us or not paired_us or paired_us <= 0 or max(paired_us / best_us, best_us / paired_us) <= apart:
        return ""
    return f", the best took {paired_us:.4g} us beside it"


def revert_reason(comparison: Comparison) -> str:
    """Why a correct candidate that timed faster than the best was reverted ("" when it was slower)."""
    from ..harness.timing import MIN_GAIN

    if comparison.significant:
        return " but its score is not below the best's"
    if comparison.decision_speedup <= 1.0:
        return ""
    if comparison.wall_confirmed is False:
        return " but the judge's own clock did not see half that gain"
    needed = 1.0 - (MIN_GAIN + comparison.noise_frac)
    if not math.isfinite(needed) or needed <= 0:
        return " within the noise"
    return f" within the noise (a keep needs {ratio_text(1 / needed)})"


def ratio_text(ratio: float) -> str:
    """``1.03x``; four decimals near 1, where three digits would read "1x" for a gain of 0.4%."""
    return f"{ratio:.4f}x" if abs(ratio - 1.0) < 0.005 else f"{ratio:.3g}x"


def slots_line(activities: list[tuple[str, str, float] | None], now: float) -> str:
    """``slots: [0] softmax proposing 12s | [1] rmsnorm evaluating on gpu1 3s | [2] idle``:
    one entry per slot, ``(problem, what, since)`` or None when idle."""
    parts = []
    for i, activity in enumerate(activities):
        if activity is None:
            parts.append(f"[{i}] idle")
        else:
            problem, what, since = activity
            parts.append(f"[{i}] {problem} {what} {format_duration(max(now - since, 0.0))}")
    return "slots: " + " | ".join(parts)
