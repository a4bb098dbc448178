"""``autokernel optimize``: run the optimization loop on one problem, several, or a plan."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from .common import EXIT_OK, EXIT_USAGE, check_scale_flags, check_writable_dir, fail_usage, fmt_or_dash, parse_shapes

EXIT_INTERRUPTED = 130


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize)


def optimize(
    problem: Optional[List[str]] = typer.Option(None, "--problem", help="Problem kind or problem file (repeatable)."),
    plan: Optional[Path] = typer.Option(None, "--plan", help="plan.json written by `autokernel profile`."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Workspace directory (a git repository; created if absent)."),
    kernel: Optional[Path] = typer.Option(None, "--kernel", help="Start kernel file (default: the shipped starter)."),
    shape: Optional[List[str]] = typer.Option(None, "--shape", help="Target shape, e.g. 4096x4096 (repeatable)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16 | fp16 | fp32."),
    agent: str = typer.Option("tuner", "--agent", help="tuner | llm | command."),
    llm: Optional[str] = typer.Option(None, "--llm", help="openai:MODEL or anthropic:MODEL (llm agent)."),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url", help="OpenAI-compatible endpoint URL."),
    llm_max_calls: Optional[int] = typer.Option(None, "--llm-max-calls", help="Stop after this many model calls."),
    agent_cmd: Optional[str] = typer.Option(None, "--agent-cmd", help='Command agent: shell command with {prompt_file}.'),
    budget: Optional[str] = typer.Option(None, "--budget", help="Wall-clock budget: 90s, 30m, 8h, 1h30m."),
    max_experiments: Optional[int] = typer.Option(None, "--max-experiments", help="At most N experiments per problem (0: judge the starting kernels only)."),
    device: str = typer.Option("auto", "--device", help="auto | cuda | cpu."),
    seed: int = typer.Option(0, "--seed", help="Seed of the tuner and of the agents' choices."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds allowed per evaluation."),
    run_name: Optional[str] = typer.Option(None, "--run-name", help="Run name (branch autokernel/<run-name>)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines, only the summary."),
    use_existing_repo: bool = typer.Option(False, "--use-existing-repo", help="Allow --workdir to be a git repository that is not an autokernel workspace (the run gets its own branch there)."),
    parallel: Optional[int] = typer.Option(None, "--parallel", help="Experiments in flight (default: one per GPU; 1 on CPU, where N means N evaluation processes)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPUs to evaluate on, e.g. 0,2,5 (default: every visible GPU)."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Evaluate on a Ray cluster at ADDRESS, or 'local' (needs the dist extra)."),
) -> None:
    """Optimize kernels: propose, evaluate, keep or revert, repeat (resumable)."""
    from ..agents.base import AGENT_NAMES, AgentConfig, AgentConfigError
    from ..loop.budget import BudgetError, parse_budget
    from ..loop.optimize import OptimizeError, Target, run_optimize, targets_from_plan
    from ..loop.targets import target_dir_name
    from ..plan import PlanError, load_plan
    from ..problems import ProblemError, get_problem

    if bool(problem) == bool(plan):
        fail_usage("give exactly one of --problem or --plan")
    if workdir is None:
        fail_usage("--workdir DIR is required (the workspace: a git repository, created if absent)")
    if agent not in AGENT_NAMES:
        fail_usage(f"unknown agent {agent!r}; choose one of {', '.join(AGENT_NAMES)}")
    if timeout <= 0:
        fail_usage("--timeout must be positive")
    try:
        budget_s = parse_budget(budget) if budget is not None else None
    except BudgetError as exc:
        fail_usage(str(exc))
    if max_experiments is not None and max_experiments < 0:
        fail_usage("--max-experiments must be >= 0")
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        fail_usage(f"unknown device {device!r}; use auto, cuda or cpu")
    gpu_list = check_scale_flags(parallel, gpus, ray)
    check_writable_dir(workdir, "--workdir")

    try:
        if plan is not None:
            if kernel is not None or shape or dtype:
                fail_usage("--kernel, --shape and --dtype go with --problem, not --plan")
            targets = targets_from_plan(load_plan(plan))
            if not targets:
                fail_usage(f"{plan} has no problem autokernel supports; nothing to optimize")
        else:
            if len(problem) > 1 and (kernel is not None or shape):
                fail_usage("--kernel and --shape go with a single --problem")
            targets = []
            for spec in problem:
                prob = get_problem(spec)
                shapes = parse_shapes(prob, shape) or None
                name = prob.kind if spec == prob.kind else Path(spec).stem
                targets.append(Target(name=target_dir_name(name), spec=spec, shapes=shapes, dtype=dtype,
                                      start_file=kernel))
            if dtype is not None:
                from ..problems import parse_dtype

                parse_dtype(dtype)
            _refuse_shapes_too_slow_on_cpu(targets, device, dtype, timeout)
        config = AgentConfig(name=agent, seed=seed, llm=llm, llm_base_url=llm_base_url, llm_max_calls=llm_max_calls,
                             agent_cmd=agent_cmd)
        summary = run_optimize(targets, workdir, agent=config, budget_s=budget_s, max_experiments=max_experiments,
                               device=device, seed=seed, run_name=run_name, timeout_s=timeout,
                               show_progress=not quiet, plan_path=plan, use_existing_repo=use_existing_repo,
                               parallel=parallel, gpus=gpu_list, ray=ray)
    except (ProblemError, PlanError, OptimizeError, AgentConfigError) as exc:
        fail_usage(str(exc))
    except ValueError as exc:  # shape/dtype parsing, workspace refusal
        fail_usage(str(exc))

    if summary.stopped_reason == "interrupted":
        from ..loop.summary import unreachable_text

        outage = f" ({unreachable_text(summary)})" if summary.outages else ""
        print(f"autokernel: interrupted; {summary.experiments_run} experiment(s) recorded in {summary.workdir}"
              f"{outage}; run the same command again to resume", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED)
    print_summary(summary)
    if _exit_for(summary) == EXIT_USAGE:
        fail_usage(summary.message)
    raise typer.Exit(EXIT_OK)


def _refuse_shapes_too_slow_on_cpu(targets, device: str, dtype: Optional[str], timeout: float) -> None:
    """On CPU, a --shape the interpreter cannot judge within --timeout is refused up front (as
    `bench` does): every evaluation would time out, the starting kernel's included.  So is a
    KernelBench file at its own sizes (a new user's 19_ReLU.py at 4096 x 393216 ran out of the
    machine's 24 GiB and was killed without a word)."""
    from ..hardware import resolve_device
    from ..problems import get_problem, parse_dtype
    from .bench_cmd import refuse_too_slow_on_cpu

    if resolve_device(device).startswith("cuda"):
        return
    for t in targets:
        prob = get_problem(t.spec)
        refuse_too_slow_on_cpu(prob, t.spec, t.shapes, [parse_dtype(dtype)] if dtype else list(prob.dtypes), timeout,
                               optimizing=True)


def _exit_for(summary) -> int:
    """A refused key or unknown model is the user's to fix (exit 2); every other stop is 0."""
    return EXIT_USAGE if summary.stopped_reason == "agent-refused" else EXIT_OK


def print_summary(summary) -> None:
    from rich.console import Console

    from ..loop.figures import EAGER_DASH_REASON
    from ..report import compact_table, fmt_us

    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    table = compact_table(f"autokernel optimize: {summary.workdir} ({summary.branch})",
                          [("problem", "left"), ("exps", "right"), ("kept", "right"), ("start us", "right"),
                           ("best us", "right"), ("vs start", "right"), ("vs eager", "right"), ("% roof", "right")])
    for p in summary.problems:
        table.add_row(p.name, str(p.experiments), str(p.kept), fmt_us(p.start_score_us), fmt_us(p.best_score_us),
                      fmt_or_dash(p.speedup_vs_start, ".2f", "x"), fmt_or_dash(p.speedup_vs_eager, ".2f", "x"),
                      fmt_or_dash(p.pct_roofline, ".0f"))
    console.print(table)
    names = [p.name for p in summary.problems]
    where = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
    console.print(f"best kernels: {summary.workdir}/problems/{where}/kernel.py", markup=False)
    if any(p.timing_kind == "interpreter" for p in summary.problems):
        console.print("times are Triton-interpreter wall-clock on CPU: they say nothing about GPU performance; "
                      + EAGER_DASH_REASON, markup=False)
    line = f"stopped: {summary.stopped_reason}"
    if summary.message:
        line += f" ({summary.message})"
    console.print(line + f"; {summary.experiments_run} experiment(s) this run; results in {summary.workdir / 'results.tsv'}",
                  markup=False)
    from ..loop.summary import throughput_text, unreachable_text

    if summary.outages:
        console.print(unreachable_text(summary), markup=False)
    if summary.lanes and throughput_text(summary):
        console.print(throughput_text(summary), markup=False)
