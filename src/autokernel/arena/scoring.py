"""Correctness and fast_p (KernelBench's metric), as pure functions.

fast_p is the share of problems that are correct *and* faster than PyTorch eager by more than
a factor p (fast_0: correct).  The conditional variant also asks for correctness at held-out
sizes.  The denominator is every problem that was judged or had no solution; problems skipped
because they cannot run here are left out (and listed).
"""
from __future__ import annotations

from typing import Sequence

from .records import ProblemResult

P_VALUES: tuple[float, ...] = (0.0, 1.0, 1.5, 2.0)


def p_name(p: float) -> str:
    return f"fast_{p:g}"


def fast_p(correct: Sequence[bool], speedups: Sequence[float | None], p: float) -> float | None:
    """Share of entries correct with speedup > p.  None when p > 0 and no speedup was measured
    (on the CPU): the share would say nothing."""
    if len(correct) != len(speedups):
        raise ValueError("one speedup per problem")
    if not correct:
        return None
    if p > 0 and all(s is None for s in speedups):
        return None
    hits = sum(1 for ok, s in zip(correct, speedups) if ok and (p == 0 or (s is not None and s > p)))
    return hits / len(correct)


def counted(results: Sequence[ProblemResult]) -> list[ProblemResult]:
    return [r for r in results if r.status != "skipped"]


def summary(results: Sequence[ProblemResult]) -> dict:
    """``{"problems": n, "skipped": k, "file_sizes": {...}, "heldout": {...}}``: correctness
    and each fast_p, at the file's sizes and conditional on held-out sizes."""
    rows = counted(results)
    speedups = [r.speedup_vs_eager for r in rows]
    out: dict = {"problems": len(rows), "skipped": len(results) - len(rows)}
    for key, correct in (("file_sizes", [r.correct for r in rows]), ("heldout", [r.correct_heldout for r in rows])):
        part = {"correct": (sum(correct) / len(correct)) if correct else None}
        for p in P_VALUES:
            part[p_name(p)] = fast_p(correct, speedups, p)
        out[key] = part
    return out
