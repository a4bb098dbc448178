"""The run's figures, defined once: "start", "best", "vs start" and "vs eager".

Every place that shows them (progress lines, the optimize summary, ``results.tsv``, the report,
commit messages) uses these functions, so the same words always mean the same number:

- **start**: the starting kernel's score (the ``baseline`` row's ``latency_us``), when correct.
- **best**: the score of the kernel now at ``problems/<name>/kernel.py``: the last ``keep``
  row, else the baseline.  A keep needs a paired gain over the incumbent *and* a score below
  the incumbent's recorded one (``loop.optimize.decide``), so best is never slower than start.
- **vs start** of a row: ``start / latency_us`` of that row: the ratio of two recorded scores,
  nothing chained, nothing re-measured.  Anyone can recompute it from ``results.tsv``.
- **vs eager** of a row: ``eager / latency_us`` with both measured by the harness in the same
  evaluation; none (a dash) when the kernel ran in the Triton interpreter, whose times have
  nothing to do with eager PyTorch running natively (``EAGER_DASH_REASON``).
"""
from __future__ import annotations

from typing import Iterable, Sequence

INTERPRETER = "interpreter"
EAGER_DASH_REASON = ("vs eager is '-' for interpreter timings: the kernel ran in the Triton interpreter "
                     "and eager PyTorch natively, so their ratio means nothing")


def speedup(before_us: float | None, after_us: float | None) -> float | None:
    """``before / after``; None when either is missing or not positive."""
    if not before_us or not after_us or before_us <= 0 or after_us <= 0:
        return None
    return before_us / after_us


def vs_start(start_us: float | None, latency_us: float | None) -> float | None:
    return speedup(start_us, latency_us)


def vs_eager(eager_us: float | None, latency_us: float | None, timing_kind: str | None) -> float | None:
    if timing_kind == INTERPRETER:
        return None
    return speedup(eager_us, latency_us)


def best_of(rows: Sequence) -> object | None:
    """The row of the kernel now in ``kernel.py``: the last keep, else the baseline.  ``rows``
    are ``ExperimentRecord``s of one problem (anything with ``status``)."""
    kept = [r for r in rows if _status(r) == "keep"]
    if kept:
        return kept[-1]
    return next((r for r in rows if _status(r) == "baseline"), None)


def start_and_best(rows: Iterable) -> tuple[float | None, float | None]:
    """(start us, best us) of one problem's rows, None where not correct or not timed."""
    rows = list(rows)
    base = next((r for r in rows if _status(r) == "baseline"), None)
    best = best_of(rows)
    start_us = _latency(base) if base is not None and not _failed(base) else None
    best_us = _latency(best) if best is not None and not _failed(best) else None
    return start_us, best_us


def _status(row) -> str:
    return row.get("status", "") if isinstance(row, dict) else row.status


def _latency(row) -> float | None:
    value = row.get("latency_us") if isinstance(row, dict) else row.latency_us
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def _failed(row) -> bool:
    return bool(row.get("failed_stage") if isinstance(row, dict) else row.failed_stage)
