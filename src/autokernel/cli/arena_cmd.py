"""`autokernel arena PROBLEMS --solutions DIR` (or `--optimize --agent ...`).

Judges every KernelBench problem file with the strict judge (problems/kernelbench.py) and prints
an 80-column table with correctness and fast_p, at the file's sizes and over held-out sizes.
Results go to ``--out`` (one JSON per problem, ``arena.json``, ``report.md``, ``speedup.png``)
and a later run with the same ``--out`` resumes.  Exit 0 when the run completed, whatever the
scores; 2 for bad usage (one line on stderr, nothing written).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .common import EXIT_OK, check_writable_dir, fail_usage, says_when_interrupted


def arena(
    problems: List[str] = typer.Argument(..., help="problem files and/or directories of them"),
    solutions: Optional[Path] = typer.Option(None, "--solutions", help="directory of ModelNew files named like "
                                             "their problem files"),
    out: Path = typer.Option(Path("arena-out"), "--out", help="results directory (resumable)"),
    device: str = typer.Option("auto", "--device", help="auto, cuda or cpu"),
    scale: Optional[float] = typer.Option(None, "--scale", help="multiply the files' size constants by F "
                                          "(e.g. 0.01 for the CPU)"),
    allow_torch: bool = typer.Option(False, "--allow-torch", help="KernelBench's lenient rule: only the "
                                     "reference's own ops are refused in ModelNew"),
    atol: Optional[float] = typer.Option(None, "--atol", help="absolute tolerance (default: KernelBench's)"),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="relative tolerance (default: KernelBench's)"),
    timeout: float = typer.Option(120.0, "--timeout", help="seconds each call of a solution may take"),
    compile_timeout: float = typer.Option(600.0, "--compile-timeout", help="seconds importing a solution may "
                                          "take (load_inline builds; never less than --timeout)"),
    redo: bool = typer.Option(False, "--redo", help="judge again the problems already done in --out"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object {problems, fast_p}"),
    optimize: bool = typer.Option(False, "--optimize", help="run the optimize loop on every problem first"),
    agent: str = typer.Option("llm", "--agent", help="with --optimize: llm | command (an agent that writes kernels)"),
    llm: Optional[str] = typer.Option(None, "--llm", help="openai:MODEL or anthropic:MODEL (llm agent)"),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url", help="OpenAI-compatible endpoint URL"),
    agent_cmd: Optional[str] = typer.Option(None, "--agent-cmd", help="command agent: shell command with "
                                            "{prompt_file}"),
    budget_per_problem: Optional[str] = typer.Option(None, "--budget-per-problem", help="with --optimize: "
                                                     "wall-clock budget per problem (90s, 30m, 1h)"),
    max_experiments: Optional[int] = typer.Option(None, "--max-experiments", help="with --optimize: at most N "
                                                  "experiments per problem (0: judge the starting kernels only)"),
) -> None:
    """Judge KernelBench solutions (or optimize from nothing): table, fast_p, report."""
    from ..arena.discovery import ArenaUsageError, find_problems
    from ..arena.judge import JudgeSettings
    from ..arena.report import table
    from ..arena.run import run_arena
    from ..harness.evaluate import resolve_device
    from ..problems.kernelbench import KernelBenchOptions

    if optimize == (solutions is not None):
        fail_usage("give exactly one of --solutions DIR or --optimize")
    if solutions is not None and not solutions.is_dir():
        fail_usage(f"--solutions is not a directory: {solutions}")
    if scale is not None and not 0 < scale <= 1:
        fail_usage(f"--scale must be in (0, 1], got {scale:g}")
    for name, value in (("--timeout", timeout), ("--compile-timeout", compile_timeout), ("--atol", atol),
                        ("--rtol", rtol)):
        if value is not None and not value > 0:
            fail_usage(f"{name} must be positive, got {value:g}")
    if out.exists() and not out.is_dir():
        fail_usage(f"--out is not a directory: {out}")
    try:
        files = find_problems(problems)
        dev = resolve_device(device)
    except (ArenaUsageError, ValueError) as exc:
        fail_usage(str(exc))
    check_writable_dir(out, "--out")
    if solutions is not None:
        from ..arena.discovery import solution_for

        if not any(solution_for(f, solutions) for f in files):  # every problem would fail, with no word why
            names = ", ".join(f.name for f in files[:3]) + (", ..." if len(files) > 3 else "")
            print(f"autokernel: warning: no file in {solutions} is named like a problem file ({names}): every "
                  "problem counts as failed", file=sys.stderr)
    optimize_settings = None
    if optimize:
        optimize_settings = _optimize_settings(agent, llm, llm_base_url, agent_cmd, budget_per_problem,
                                               max_experiments)
    settings = JudgeSettings(device=dev, options=KernelBenchOptions(scale=scale, allow_torch=allow_torch,
                                                                    atol=atol, rtol=rtol),
                             timeout_s=timeout, compile_timeout_s=compile_timeout)
    say = (lambda line: print(line, file=sys.stderr, flush=True))
    title = f"arena: {len(files)} problem(s) on {dev}" + (f", sizes x{scale:g}" if scale else "")
    with says_when_interrupted(f"the results so far are in {out}; run the same command again to go on"):
        try:
            run = run_arena(files, out, settings, solutions=solutions, optimize=optimize_settings, redo=redo,
                            progress=say, title=title)
        except ArenaUsageError as exc:  # the agent refused for good (--optimize): the problems done are kept
            fail_usage(str(exc))
    if json_out:
        from ..arena.report import as_json

        sys.stdout.write(json.dumps(as_json(run.results, run.summary), default=str) + "\n")
    else:
        print(table(run.results, run.summary))
        print(f"results in {out}/ (report.md" + (", speedup.png" if "plot" in run.paths else "") + ")")
    raise typer.Exit(EXIT_OK)


def _optimize_settings(agent, llm, llm_base_url, agent_cmd, budget, max_experiments):
    from ..agents.base import AGENT_NAMES, AgentConfig, AgentConfigError, make_agent
    from ..arena.run import OptimizeSettings
    from ..loop.budget import BudgetError, parse_budget

    if agent not in AGENT_NAMES:
        fail_usage(f"unknown agent {agent!r}; choose one of {', '.join(n for n in AGENT_NAMES if n != 'tuner')}")
    if agent == "tuner":  # the placeholder ModelNew has no knobs: the tuner would stop at once, with nothing
        fail_usage("--agent tuner cannot write a first kernel: the tuner turns the knobs of a kernel, and --optimize "
                   "starts from none; use --agent llm or --agent command, or judge your own kernels with --solutions")
    if budget is None:
        fail_usage("--optimize needs --budget-per-problem (e.g. 30m)")
    try:
        budget_s = parse_budget(budget)
    except BudgetError as exc:
        fail_usage(str(exc))
    if max_experiments is not None and max_experiments < 0:
        fail_usage("--max-experiments must be >= 0")
    config = AgentConfig(name=agent, llm=llm, llm_base_url=llm_base_url, agent_cmd=agent_cmd)
    try:
        make_agent(config)  # a misconfigured agent is refused before any problem is optimized
    except AgentConfigError as exc:
        fail_usage(str(exc))
    return OptimizeSettings(agent=config, budget_per_problem_s=budget_s, max_experiments=max_experiments)


def register(app: typer.Typer) -> None:
    app.command("arena")(arena)
