"""A whole arena run: judge (or first optimize, then judge) every problem, resumably.

Each problem's result is stored as soon as it is known (store.py); a later run with the same
output directory skips the problems already done unless ``redo``, or unless the solution, the
problem file or the judge's settings changed since (``store.basis``).  With ``optimize`` the
optimize loop (loop.optimize.run_optimize) runs on each problem first, in a workspace of its
own under ``<out>/workspaces/<problem>``, starting from a placeholder ``ModelNew`` that carries
the problem's text (the agent writes the first kernel); the arena then judges the best kernel
the loop kept.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from . import report, scoring, store
from .discovery import ArenaUsageError, solution_for
from .judge import JudgeSettings, judge, load
from .records import ProblemResult


@dataclass
class OptimizeSettings:
    agent: Any  # agents.base.AgentConfig or an agent object
    budget_per_problem_s: float
    max_experiments: int | None = None


@dataclass
class ArenaRun:
    results: list[ProblemResult]
    summary: dict
    paths: dict[str, Path] = field(default_factory=dict)
    reused: int = 0
    not_run: int = 0  # problems left when the deadline came


PLACEHOLDER = '''"""The first kernel is yours to write: a ModelNew for the KernelBench problem below.

Keep Model's constructor and parameters (the judge hands them the weights it draws for every
case) and compute forward with Triton kernels of your own: no PyTorch compute (allocation,
views and copies are fine).

{problem}
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        raise NotImplementedError("no kernel yet: write ModelNew")
'''


def placeholder_source(problem_file: Path) -> str:
    text = problem_file.read_text().replace('"""', "'''").replace("\\", "\\\\")
    return PLACEHOLDER.format(problem=f"Problem file {problem_file.name}:\n\n{text}")


def run_arena(problem_files: Sequence[Path], out_dir: Path, settings: JudgeSettings, *,
              solutions: Path | None = None, optimize: OptimizeSettings | None = None, redo: bool = False,
              progress: Callable[[str], None] = lambda line: None, title: str = "arena",
              deadline: float | None = None) -> ArenaRun:
    """Judge every problem (see the module docstring).  ``deadline`` (time.monotonic()): no
    new problem starts after it (``not_run`` counts those left; run again to resume)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[ProblemResult] = []
    reused = not_run = 0
    for i, problem_file in enumerate(problem_files, 1):
        head = f"[{i}/{len(problem_files)}] {problem_file.name}"
        if deadline is not None and time.monotonic() >= deadline and store.load(out_dir, problem_file) is None:
            not_run += 1
            continue
        given = solution_for(problem_file, solutions) if optimize is None else None
        basis = store.basis(problem_file, given, (settings, "optimized" if optimize else "given"))
        done = None if redo else store.load(out_dir, problem_file)
        if done is not None and done.extra.get("basis") != basis:
            progress(f"{head}: its solution, problem file or options changed since it was judged: judging again")
            done = None
        if done is not None:
            results.append(done)
            reused += 1
            progress(f"{head}: done before ({_short(done)})")
            continue
        progress(f"{head}: judging" if optimize is None else f"{head}: optimizing")
        optimize_s = None
        if optimize is not None:
            started = time.perf_counter()
            solution, note = _optimize(problem_file, out_dir, settings, optimize)
            optimize_s = round(time.perf_counter() - started, 2)
        else:
            solution, note = given, ""
        try:
            result = judge(problem_file, solution, settings)
        except Exception as exc:
            # The judge itself failed (the reference out of memory at full size, a harness error a
            # solution may have provoked): counted as not correct, never left out of fast_p.
            result = ProblemResult(problem_file.stem, str(problem_file), str(solution) if solution else None,
                                   "judged", verdict="error", message=f"could not run here: {type(exc).__name__}: "
                                   + " ".join(str(exc).split())[:200])
        finally:
            free_device_memory()
        if optimize_s is not None:
            result.extra["optimize_s"] = optimize_s
        if note:
            result.extra["optimize"] = note
            if solution is None and result.status == "no-solution":  # not a --solutions folder without the file
                result.message = note
        result.extra["basis"] = basis
        store.save(out_dir, problem_file, result)
        results.append(result)
        said = "; ".join(part for part in (time_clause(result, optimize_s),
                                           result.sizes if settings.options.scale else "") if part)
        progress(f"{head}: {_short(result)}" + (f" ({said})" if said else ""))
    summary = scoring.summary(results)
    paths = report.write(out_dir, results, summary, title)
    return ArenaRun(results, summary, paths, reused, not_run)


def free_device_memory() -> None:
    """Between problems: drop what the last one left (its compiled baselines, cached CUDA
    blocks), so one problem's memory is not held while the next is judged."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        import torch._dynamo

        torch._dynamo.reset()
        gc.collect()
        torch.cuda.empty_cache()


def time_clause(result: ProblemResult, optimize_s: float | None) -> str:
    """``optimized in 61.2 s, judged in 5.3 s``: what the problem's seconds were spent on (a
    problem never judged, no solution or too large here, has no judging time)."""
    parts = [f"optimized in {optimize_s:.1f} s"] if optimize_s is not None else []
    if result.status == "judged" and result.wall_s > 0:  # 0: the judge itself failed
        parts.append(f"judged in {result.wall_s:.1f} s")
    return ", ".join(parts)


def _short(r: ProblemResult) -> str:
    if r.status != "judged":
        return r.status + (f": {r.message}" if r.status in ("skipped", "no-solution") and r.message else "")
    text = r.verdict + (f" at {r.failed_stage}" if r.failed_stage else "")
    if r.speedup_vs_eager is not None:
        text += f", {r.speedup_vs_eager:.2f}x eager"
    if r.heldout:
        text += f", held-out {r.heldout}"
    return text


def _optimize(problem_file: Path, out_dir: Path, settings: JudgeSettings,
              optimize: OptimizeSettings) -> tuple[Path | None, str]:
    """Run the optimize loop on one problem; the best kernel kept (None when the problem
    cannot run here or no correct kernel was kept) and a note."""
    from ..loop.optimize import Target, run_optimize
    from ..loop.targets import target_dir_name

    problem, skipped = load(problem_file, settings)
    if problem is None:
        return None, skipped.message
    workdir = out_dir / "workspaces" / problem_file.stem
    start = out_dir / "workspaces" / f"{problem_file.stem}.start.py"
    start.parent.mkdir(parents=True, exist_ok=True)
    start.write_text(placeholder_source(problem_file))
    shape = problem.shapes_for(settings.device)[0]
    # workspaces made before 2026-12-07 called every problem `kernel`; they resume under that name
    name = "kernel" if (workdir / "problems" / "kernel").is_dir() else target_dir_name(problem_file.stem)
    target = Target(name=name, spec=str(problem_file.resolve()),
                    shapes=[dict(shape)] if settings.options.scale else None, start_file=start)
    summary = run_optimize([target], workdir, agent=optimize.agent, budget_s=optimize.budget_per_problem_s,
                           max_experiments=optimize.max_experiments, device=settings.device,
                           timeout_s=settings.timeout_s, show_progress=False, run_name=problem_file.stem)
    if summary.stopped_reason == "interrupted":  # Ctrl-C inside the loop: stop the arena, store nothing
        raise KeyboardInterrupt                    # for this problem (the next run resumes its workspace)
    if summary.stopped_reason == "agent-refused":  # a user mistake every later problem would repeat
        raise ArenaUsageError(summary.message or "the agent was refused")
    best = summary.problems[0] if summary.problems else None
    kernel = Path(summary.workdir) / "problems" / name / "kernel.py"
    note = f"{summary.experiments_run} experiment(s), stopped: {summary.stopped_reason}"
    why = (summary.message or "").removeprefix(f"{name}: ")
    if why and summary.stopped_reason != "budget":  # why it stopped early: "all-done" alone said nothing
        note += f" ({why})"
    if best is None or not best.kept or not kernel.is_file():
        return None, note + "; no correct kernel kept"
    return kernel, note
