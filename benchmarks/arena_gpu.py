"""KernelBench level 1 in the arena, on a GPU (issue 13).

Two arena runs over the level-1 problem files (``--problems``, e.g. ``../shared/kernelbench/level1``;
the directory does not travel with the repository, so it is an argument):

1. ``solutions``: our own Triton solutions (``tests/kernelbench_solutions/level1``, 17 problems:
   activations, softmax/log-softmax, norms, reductions, matmuls, cross-entropy), judged by the
   strict judge at the files' sizes and at held-out sizes, timed against eager and
   torch.compile: the table and fast_p.
2. ``reference``: every level-1 file's own ``Model`` renamed ``ModelNew`` and handed in as the
   solution (generated under ``--out``).  The strict judge must reject all of them; any that
   passes is listed.  Files that cannot run (memory, missing packages, sizes) are listed with why.

Both runs are resumable (``--out`` keeps one JSON per problem): ``--budget-s`` bounds the wall
time (no new problem starts after it; the first run gets 60% of it) and running the same command
again continues where it stopped.  ``--cpu-smoke`` runs a few problems at ``--scale 0.005`` in
the Triton interpreter to check the script end to end.

    PYTHONPATH=src python benchmarks/arena_gpu.py --problems ../shared/kernelbench/level1 --out arena-gpu
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from autokernel.arena import report  # noqa: E402
from autokernel.arena.discovery import find_problems  # noqa: E402
from autokernel.arena.judge import JudgeSettings  # noqa: E402
from autokernel.arena.run import run_arena  # noqa: E402
from autokernel.problems.kernelbench import KernelBenchOptions  # noqa: E402

SOLUTIONS = ROOT / "tests" / "kernelbench_solutions" / "level1"
SMOKE = ("19_ReLU.py", "23_Softmax.py", "47_Sum_reduction_over_a_dimension.py", "40_LayerNorm.py",
         "1_Square_matrix_multiplication_.py")


def reference_as_solution(problem: Path) -> str:
    """The problem file with ``Model`` renamed ``ModelNew`` (no kernel at all)."""
    return re.sub(r"\bModel\b", "ModelNew", problem.read_text())


def write_reference_solutions(problems: list[Path], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for p in problems:
        (folder / p.name).write_text(reference_as_solution(p))


def markdown_results(title: str, run) -> str:
    lines = [f"### {title}", "", "| problem | verdict | failed stage | x eager | x torch.compile | held-out |",
             "|---|---|---|---|---|---|"]
    for r in run.results:
        lines.append("| " + " | ".join(report.row_cells(r)) + " |")
    lines += ["", "```", *report.score_lines(run.summary), "```"]
    if run.not_run:
        lines.append(f"{run.not_run} problem(s) not run yet (budget): run the same command again to continue.")
    return "\n".join(lines)


def cannot_run(run) -> list[str]:
    return [f"- {r.problem}: {r.message}" for r in run.results
            if r.status == "skipped" or r.verdict in ("error", "crash", "timeout")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", required=True, type=Path, help="the KernelBench level1 directory")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--budget-s", type=float, default=480.0, help="wall-clock bound (default 480 s)")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS)
    parser.add_argument("--cpu-smoke", action="store_true", help="a few problems, shrunk, in the interpreter")
    parser.add_argument("--allow-torch", action="store_true", help="KernelBench's lenient rule")
    args = parser.parse_args(argv)
    if not args.problems.is_dir():
        print(f"arena_gpu: error: not a directory: {args.problems}", file=sys.stderr)
        return 2
    started = time.monotonic()
    problems = find_problems([str(args.problems)])
    if args.cpu_smoke:
        problems = [p for p in problems if p.name in SMOKE]
    device = "cpu" if args.cpu_smoke else "cuda"
    options = KernelBenchOptions(scale=0.005 if args.cpu_smoke else None, allow_torch=args.allow_torch)
    settings = JudgeSettings(device=device, options=options, timeout_s=120.0)
    say = (lambda line: print(line, file=sys.stderr, flush=True))

    # the slow ones last (matmuls: their torch.compile max-autotune baselines take minutes)
    solved = sorted((p for p in problems if (args.solutions / p.name).is_file()),
                    key=lambda p: ("matrix_multiplication" in p.name, problems.index(p)))
    say(f"== our solutions: {len(solved)} problem(s)")
    ours = run_arena(solved, args.out / "solutions", settings, solutions=args.solutions, progress=say,
                     title="KernelBench level 1: our Triton solutions", deadline=started + 0.6 * args.budget_s)
    reference_dir = args.out / "reference_solutions"
    write_reference_solutions(problems, reference_dir)
    say(f"== reference as solution: {len(problems)} problem(s)")
    refs = run_arena(problems, args.out / "reference", settings, solutions=reference_dir, progress=say,
                     title="KernelBench level 1: the reference renamed ModelNew", deadline=started + args.budget_s)
    passed = [r.problem for r in refs.results if r.correct]
    wall = time.monotonic() - started
    print(f"## KernelBench level 1 on {device} ({wall:.0f} s wall)\n")
    print(markdown_results(f"Our Triton solutions ({len(ours.results)} judged)", ours))
    print()
    print(markdown_results(f"Reference as solution ({len(refs.results)} judged, must all be rejected)", refs))
    print()
    print(f"reference copies accepted: {len(passed)}" + (f" ({', '.join(passed)})" if passed else " (all rejected)"))
    notes = cannot_run(refs)
    if notes:
        print("\nLevel-1 files that could not run here:")
        print("\n".join(notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
