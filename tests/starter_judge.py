"""The full judge on one shipped starter, in a process of its own (for test_starters.py, which
judges the starters two at a time: each evaluation keeps about one core busy, interpreter in its
worker and references in its parent, and CI has two)."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class StarterVerdict:
    kind: str
    verdict: str
    failed_stage: str | None
    message: str
    stages: list[str]
    timing_kind: str | None
    timed_shapes: int
    target_shapes: int
    integrity: list[str]


def judge_starter(kind: str, shapes: tuple[str, ...] | None = None) -> StarterVerdict:
    """``shapes``: target shapes of the judge's (None: the problem's own CPU shapes)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from autokernel.harness import Evaluator
    from autokernel.problems.registry import KERNELS_DIR

    # baselines off: eager timings of the interpreter run say nothing; timing stays on for its re-check
    with Evaluator(kind, device="cpu", shapes=shapes, baselines=False) as ev:
        result = ev.evaluate(KERNELS_DIR / f"{kind}.py")
        shapes = len(ev.shapes)
    return StarterVerdict(kind=kind, verdict=result.verdict, failed_stage=result.failed_stage,
                          message=result.message or "", stages=[s.name for s in result.stages],
                          timing_kind=result.timing_kind, timed_shapes=len(result.timings), target_shapes=shapes,
                          integrity=[f"{f.rule}: {f.message}" for f in result.integrity])
