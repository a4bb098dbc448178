"""Judge one solution file for one KernelBench problem, as the arena counts it.

1. At the file's sizes (or ``--scale``d ones): the strict judge (harness.evaluate) with every
   stage but the held-out one, timed against eager and torch.compile on a GPU.  On the CPU the
   timings would be the Triton interpreter's, so nothing is timed and speedups stay empty.
2. When that passes: the whole judge again, untimed, at held-out sizes (every size constant
   moved to an unseen odd value, kb_sizes.py), drawn from a seed recorded in the message.
"""
from __future__ import annotations

import dataclasses
import os
import random
import time
from pathlib import Path

from ..problems.base import Problem, format_shape
from ..problems.kernelbench import KernelBenchOptions, load_kernelbench
from ..problems.registry import ProblemError
from .records import ProblemResult

CPU_TIMING_NOTE = "none on the CPU (interpreter times say nothing about a GPU)"


@dataclasses.dataclass(frozen=True)
class JudgeSettings:
    device: str = "cpu"
    options: KernelBenchOptions = KernelBenchOptions()
    timeout_s: float = 120.0
    compile_timeout_s: float = 600.0
    memory_budget: int | None = None  # bytes the judge may plan with (None: measured, harness/memory.py)


def load(problem_file: Path, settings: JudgeSettings) -> tuple[Problem | None, ProblemResult | None]:
    """The problem, or (None, a skipped result saying why it cannot run here)."""
    try:
        return load_kernelbench(problem_file, settings.options), None
    except ProblemError as exc:
        return None, ProblemResult(problem_file.stem, str(problem_file), None, "skipped", message=str(exc))


def interpreter_too_slow(problem: Problem, shape: dict, timeout_s: float) -> str | None:
    """Why the CPU's Triton interpreter cannot judge ``problem`` at ``shape`` within ``timeout_s``
    a call (a KernelBench file at its own sizes: gigabytes of inputs, hours a call), or None."""
    from ..interpreter_cost import too_slow

    worst = too_slow(problem, [shape], list(problem.dtypes), timeout_s)
    if worst is None:
        return None
    sizes = ", ".join(f"{name} {value}" for name, value in shape.items())
    return (f"too large for the Triton interpreter on CPU at {sizes} (about "
            f"{worst.seconds_per_call:.0f} s a call, --timeout {timeout_s:g} s)")


def judge(problem_file: Path, solution_file: Path | None, settings: JudgeSettings) -> ProblemResult:
    from ..harness.evaluate import Evaluator

    started = time.perf_counter()
    problem, skipped = load(problem_file, settings)
    if problem is None:
        return skipped
    kb = problem.kernelbench
    shape = problem.shapes_for(settings.device)[0]
    result = ProblemResult(problem_file.stem, str(problem_file), str(solution_file) if solution_file else None,
                           "judged", sizes=kb.describe(shape) if settings.options.scale else "file sizes")
    if solution_file is None:
        result.status, result.verdict, result.message = "no-solution", "missing", "no solution file"
        return result
    gpu = settings.device.startswith("cuda")
    too_large = None if gpu else interpreter_too_slow(problem, shape, settings.timeout_s)
    if too_large:
        result.status = "skipped"
        result.message = f"{too_large}: judge it on a GPU, or scaled down with --scale (0.01: each size about 1/100)"
        return result
    at_file_sizes = dataclasses.replace(problem, heldout=lambda s, rng: dict(s))
    with Evaluator(at_file_sizes, device=settings.device, timeout_s=settings.timeout_s, timing=gpu, baselines=gpu,
                   compile_timeout_s=settings.compile_timeout_s, memory_budget=settings.memory_budget) as evaluator:
        ev = evaluator.evaluate(solution_file)
    result.verdict, result.failed_stage, result.message = ev.verdict, ev.failed_stage, ev.message
    if gpu and ev.correct:
        result.speedup_vs_eager, result.speedup_vs_compile = ev.speedup_vs_eager, ev.speedup_vs_compile
        if result.speedup_vs_compile is None:
            result.timing_note = "torch.compile baseline unavailable"
    elif not gpu:
        result.timing_note = CPU_TIMING_NOTE
    if ev.correct:
        _heldout(problem, shape, solution_file, settings, result)
    result.wall_s = round(time.perf_counter() - started, 2)
    return result


def _heldout(problem: Problem, shape: dict, solution_file: Path, settings: JudgeSettings,
             result: ProblemResult) -> None:
    from ..harness.evaluate import Evaluator

    seed = int.from_bytes(os.urandom(4), "little")
    held = problem.heldout_shape(dict(shape), random.Random(seed))
    if held == dict(shape):
        result.heldout, result.heldout_message = "n/a", "the file has no size constants that can move"
        return
    result.heldout_sizes = problem.kernelbench.describe(held)
    with Evaluator(problem, device=settings.device, shapes=[held], timeout_s=settings.timeout_s, timing=False,
                   baselines=False, compile_timeout_s=settings.compile_timeout_s,
                   memory_budget=settings.memory_budget) as evaluator:
        ev = evaluator.evaluate(solution_file)
    result.heldout = "pass" if ev.correct else "fail"
    result.heldout_message = f"sizes {format_shape(held)} (seed {seed}): {ev.verdict}" + (
        f" at {ev.failed_stage}: {ev.message}" if not ev.correct else "")
