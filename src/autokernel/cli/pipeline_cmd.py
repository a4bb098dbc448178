"""``autokernel run`` (the whole pipeline), ``verify``, ``report`` and ``export``."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .common import (EXIT_OK, EXIT_VERDICT, check_run_dir, check_scale_flags, check_writable_dir, config_overrides,
                     fail_usage, fmt_or_dash)

EXIT_INTERRUPTED = 130


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("verify")(verify_cmd)
    app.command("report")(report_cmd)
    app.command("export")(export_cmd)


def _interpret_for(device: str) -> None:
    """Kernels on CPU run under the Triton interpreter; the flag must be set before a kernel
    file is imported."""
    if device == "cpu" or (device == "auto" and not _cuda_available()):
        os.environ.setdefault("TRITON_INTERPRET", "1")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def default_workdir(model: str) -> Path:
    """runs/<model>, with the model spec reduced to a safe directory name."""
    stem = Path(model.split(":")[0]).stem if model.endswith(".py") or ".py:" in model else model
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem.replace("hf:", "hf-")).strip("-.") or "model"
    return Path("runs") / name


def run(
    model: str = typer.Option("llama", "--model", help="path/to/file.py:ClassName, llama, gpt2, bert or hf:ARCH (default: the LLaMA-style example)."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Run directory (a git workspace; created if absent; default runs/<model>)."),
    budget: Optional[str] = typer.Option(None, "--budget", help="Wall-clock budget, e.g. 8h (default 8h on GPU, 10m on CPU)."),
    input_shape: Optional[str] = typer.Option(None, "--input-shape", help="Model input, e.g. 1x1024 (tokens BxS)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16 | fp16 | fp32 (default bf16 on GPU, fp32 on CPU)."),
    device: str = typer.Option("auto", "--device", help="auto | cuda | cpu."),
    config: Optional[List[str]] = typer.Option(None, "--config", help="Model config overrides k=v[,k=v] (repeatable; a list in brackets: depths=[2,2]; a JSON object in braces)."),
    agent: str = typer.Option("tuner", "--agent", help="tuner | llm | command."),
    llm: Optional[str] = typer.Option(None, "--llm", help="openai:MODEL or anthropic:MODEL (llm agent)."),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url", help="OpenAI-compatible endpoint URL."),
    llm_max_calls: Optional[int] = typer.Option(None, "--llm-max-calls", help="Stop after this many model calls."),
    agent_cmd: Optional[str] = typer.Option(None, "--agent-cmd", help="Command agent: shell command with {prompt_file}."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the tuner and of the agents' choices "
                                       "(default 0; a resumed run keeps its own)."),
    max_experiments: Optional[int] = typer.Option(None, "--max-experiments", help="At most N experiments per problem (0: judge the starting kernels only)."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds allowed per evaluation."),
    run_name: Optional[str] = typer.Option(None, "--run-name", help="Run name (branch autokernel/<run-name>)."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Do not time torch.compile in the verification."),
    extend: Optional[str] = typer.Option(None, "--extend", help="A finished run: optimize this much longer (e.g. 10m), then verify and report again."),
    use_existing_repo: bool = typer.Option(False, "--use-existing-repo", help="Allow --workdir to be a git repository that is not an autokernel workspace."),
    parallel: Optional[int] = typer.Option(None, "--parallel", help="Experiments in flight (default: one per GPU; 1 on CPU, where N means N evaluation processes)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPUs to evaluate on, e.g. 0,2,5 (default: every visible GPU)."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Evaluate on a Ray cluster at ADDRESS, or 'local' (needs the dist extra)."),
    padded: bool = typer.Option(False, "--padded", help="hf: token models: run on a padded batch (token ids and an attention_mask with rows of different lengths)."),
    as_captured: bool = typer.Option(False, "--as-captured", help="Profile the forward as it runs while a CUDA stream captures it (for models that will run with --cuda-graphs)."),
    fused_rotary: bool = typer.Option(False, "--fused-rotary", help="Plan rotary on q and k followed by attention as one attention_rotary problem."),
    fused_mlp: bool = typer.Option(False, "--fused-mlp", help="Plan SwiGLU MLPs as one fused_mlp problem (as profile --fused-mlp)."),
) -> None:
    """The whole job: profile the model, optimize its kernels, verify and report (resumable).
    Exit 0 when the patched model passes verification (or nothing is supported), 1 when it
    does not, 2 on bad input, 130 when interrupted."""
    from ..agents.base import AGENT_NAMES, AgentConfig
    from ..loop.budget import parse_budget
    from ..models import parse_input_shape
    from ..pipeline import RunOptions, run_pipeline

    if workdir is None:
        workdir = default_workdir(model)
        _say(f"workdir: {workdir}")
    if agent not in AGENT_NAMES:
        fail_usage(f"unknown agent {agent!r}; choose one of {', '.join(AGENT_NAMES)}")
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        fail_usage(f"unknown device {device!r}; use auto, cuda or cpu")
    if max_experiments is not None and max_experiments < 0:
        fail_usage("--max-experiments must be >= 0")
    if timeout <= 0:
        fail_usage("--timeout must be positive")
    gpu_list = check_scale_flags(parallel, gpus, ray)
    try:
        budget_s = parse_budget(budget) if budget is not None else None
    except ValueError as exc:
        fail_usage(f"--budget: {exc}")
    try:
        extend_s = parse_budget(extend) if extend is not None else None
    except ValueError as exc:
        fail_usage(f"--extend: {exc}")
    try:
        shape = parse_input_shape(input_shape)
    except ValueError as exc:
        fail_usage(str(exc))
    _interpret_for(device)
    check_writable_dir(workdir, "--workdir")
    opts = RunOptions(workdir=workdir, model=model, budget_s=budget_s, input_shape=shape, dtype=dtype,
                      device=device, config=config_overrides(config), seed=seed, max_experiments=max_experiments,
                      timeout_s=timeout, run_name=run_name, compile=not no_compile,
                      use_existing_repo=use_existing_repo, extend_s=extend_s,
                      parallel=parallel, gpus=gpu_list, ray=ray, padded=padded, as_captured=as_captured,
                      fused_rotary=fused_rotary, fused_mlp=fused_mlp, agent=AgentConfig(name=agent, seed=seed or 0, llm=llm, llm_base_url=llm_base_url,
                                        llm_max_calls=llm_max_calls, agent_cmd=agent_cmd))
    from ..loop.interrupts import terminate_as_interrupt

    try:
        with terminate_as_interrupt():  # a SIGTERM (timeout, a scheduler's limit) stops the run as Ctrl-C does
            result = run_pipeline(opts, log=_say)
    except ValueError as exc:  # every user-mistake error of the steps is a ValueError
        fail_usage(str(exc))
    except KeyboardInterrupt:
        print(f"autokernel: interrupted; run the same command again to resume ({workdir})", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.nothing_supported:
        raise typer.Exit(EXIT_OK)
    if result.finished_before:
        _print_report(result.report)
        raise typer.Exit(EXIT_OK if result.verify is None or result.verify.passed else EXIT_VERDICT)
    if result.interrupted:
        print(f"autokernel: interrupted; run the same command again to resume ({workdir})", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED)
    _print_report(result.report)
    _say(f"report: {Path(workdir) / 'report.md'}")
    raise typer.Exit(EXIT_OK if result.verify is None or result.verify.passed else EXIT_VERDICT)


def _say(message: str) -> None:
    print(message, flush=True)


def verify_cmd(
    workdir: Path = typer.Argument(..., help="The run directory."),
    device: Optional[str] = typer.Option(None, "--device", help="cuda | cpu (default: the run's device)."),
    seeds: int = typer.Option(3, "--seeds", help="How many fresh inputs to compare on."),
    no_timing: bool = typer.Option(False, "--no-timing", help="Only check correctness."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Do not time torch.compile."),
    iters: int = typer.Option(20, "--iters", help="Timed forward passes per model (median)."),
    no_breakdown: bool = typer.Option(False, "--no-breakdown", help="Do not profile the patched model for the time breakdown before/after."),
    cuda_graphs: bool = typer.Option(False, "--cuda-graphs", help="Run the patched model as a captured CUDA graph (GPU only; for launch-bound shapes)."),
    every_kernel: bool = typer.Option(False, "--every-kernel", help="Apply every selected kernel. By default, on a GPU (in CUDA-graph mode too), verify also times the model without each kernel and leaves out those it runs faster without (launch-bound forwards pay each op's host time), recording the choice that autokernel.apply then follows."),
    compile_mode: Optional[str] = typer.Option(None, "--compile-mode", help="torch.compile's mode to compare with: max-autotune-no-cudagraphs, max-autotune, reduce-overhead or default (default: max-autotune-no-cudagraphs, and with --cuda-graphs max-autotune, which adds torch.compile's own CUDA graphs)."),
    under_compile: str = typer.Option("auto", "--under-compile", help="What each op runs while torch.compile traces the patched model: auto (the eager op where torch.compile of it measured at least as fast as our kernel; the whole model as the last verify here measured fastest), ours, eager, or uncompiled (torch.compile leaves the patched model out)."),
) -> None:
    """Compare the model with the run's kernels against the original, then time both.
    Exit 0 pass, 1 fail, 2 bad input, 130 interrupted (Ctrl-C or SIGTERM)."""
    from ..verify import verify

    check_run_dir(workdir)
    if seeds < 1 or iters < 1:
        fail_usage("--seeds and --iters must be >= 1")
    from ..integrate.compile_policy import UNDER_COMPILE

    if under_compile not in UNDER_COMPILE:
        fail_usage(f"--under-compile must be one of {', '.join(UNDER_COMPILE)}; got {under_compile!r}")
    from ..verify import COMPILE_MODES

    if compile_mode is not None and compile_mode not in COMPILE_MODES:
        fail_usage(f"--compile-mode must be one of {', '.join(COMPILE_MODES)}; got {compile_mode!r}")
    if device is not None and device != "cpu" and not device.startswith("cuda"):
        fail_usage(f"unknown device {device!r}; use cuda or cpu")
    if not (workdir / "plan.json").is_file() and (workdir / "problems").is_dir():
        fail_usage(f"{workdir} has no model to verify: verify runs a model with and without the run's kernels, "
                   f"so it needs a run made from one (`autokernel run --model ...`, or `autokernel optimize "
                   f"--plan plan.json` after `autokernel profile`); each kernel of {workdir} was already judged "
                   f"by the harness: see `autokernel report {workdir}`")
    run_device = device if device is not None else _run_device(workdir)
    _interpret_for(run_device)
    on_gpu = run_device.startswith("cuda") or (run_device == "auto" and _cuda_available())
    if every_kernel and (no_timing or not on_gpu):
        _say("--every-kernel changes nothing here: verify times the model without each kernel only on a GPU, "
             "with timing on")
    if compile_mode is not None and (no_timing or no_compile or not on_gpu):
        _say("--compile-mode changes nothing here: verify times torch.compile only on a GPU, with timing on and "
             "without --no-compile")
    from ..loop.interrupts import terminate_as_interrupt

    try:
        with terminate_as_interrupt():
            result = verify(workdir, seeds=tuple(range(seeds)), timing=not no_timing, compile=not no_compile,
                            compile_mode=compile_mode, iters=iters, device=device, log=_say,
                            breakdown=not no_breakdown, cuda_graphs=cuda_graphs, under_compile=under_compile,
                            in_model="all" if every_kernel else "auto")
    except ValueError as exc:
        fail_usage(str(exc))
    except KeyboardInterrupt:
        print(f"autokernel: verify interrupted; {workdir / 'verify.json'} is as the last finished verify left it",
              file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED)
    _print_verify(result)
    raise typer.Exit(EXIT_OK if result.passed else EXIT_VERDICT)


def _run_device(workdir: Path) -> str:
    import json

    for name in ("run.json", "plan.json"):
        try:
            return json.loads((workdir / name).read_text()).get("device", "auto")
        except (OSError, ValueError):
            continue
    return "auto"


def _print_verify(v) -> None:
    from ..report import compact_table

    console = _console()
    table = compact_table("end-to-end vs Amdahl prediction" + (f" ({v.timing_note})" if v.timing_note else ""),
                          [(col, "left" if col == "problem" else "right") for col in
                           ("problem", "share", "vs eager", "Amdahl", "vs start", "Amdahl(start)", "applied")])
    def f(x):
        return fmt_or_dash(x, ".3g", "x")

    for k in v.predictions:
        table.add_row(k.problem, f"{100 * k.fraction:.1f}%", f(k.speedup_vs_eager), f(k.amdahl_vs_eager),
                      f(k.speedup_vs_start), f(k.amdahl_vs_start), "yes" if k.applied else "no")
    console.print(table)
    if v.eager_ms is not None:
        line = (f"eager {v.eager_ms:.3f} ms, patched {v.patched_ms:.3f} ms: {f(v.speedup_vs_eager)} "
                f"(predicted {f(v.predicted_vs_eager)})")
        if v.compile_ms is not None:
            line += f"; torch.compile ({v.compile_mode}) {v.compile_ms:.3f} ms: patched is {f(v.speedup_vs_compile)}"
        if v.compile_patched_ms is not None:
            line += f"; compile(patched) {v.compile_patched_ms:.3f} ms ({f(v.compile_patched_vs_compile)} vs compile)"
        for label, times in (("back to back", v.back_to_back_ms), ("GPU work alone", v.gpu_only_ms)):
            if times.get("compile") and times.get("patched"):
                line += f"; {label}: patched is {f(times['compile'] / times['patched'])} torch.compile"
        console.print(line + (f" [{v.timing_note}]" if v.timing_note else ""), markup=False)
    else:
        console.print("not timed (--no-timing): verify.json now holds this check of correctness only", markup=False)
    if v.compile_note:
        console.print(v.compile_note, markup=False)
    if v.breakdown is not None:
        from ..report import breakdown_table

        console.print(breakdown_table(v.breakdown))
    if v.message:
        console.print(f"note: {v.message}", markup=False)
    from ..verify_precision import clause as precision_clause

    errs = ", ".join(f"{e:.2e}" for e in v.errors)
    console.print(f"verification {'PASSED' if v.passed else 'FAILED'}: relative error {errs} "
                  f"(bound {v.tolerance:.0e}, {v.dtype}){precision_clause(v.full_precision)}; "
                  f"{len(v.replaced)} place(s) replaced", markup=False)


def _console():
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = max(console.width, 140)
    return console


def _print_report(data) -> None:
    from ..report import rich_table, too_slow_note

    _console().print(rich_table(data))
    note = too_slow_note(data)  # a CPU run whose starting evaluations timed out: why nothing was optimized
    if note:
        _say(note)


RUN_HELP = ("The run to use, where the directory holds several (one branch autokernel/NAME each: "
            "`optimize` of other problems in the same --workdir starts another); it is checked out. "
            "Default: the run checked out.")


def report_cmd(workdir: Path = typer.Argument(..., help="The run directory."),
               run: Optional[str] = typer.Option(None, "--run", help=RUN_HELP)) -> None:
    """Write report.md, progress.png and roofline.png in the run directory."""
    from ..report import write_report

    check_run_dir(workdir)
    _switch_run(workdir, run)
    try:
        data = write_report(workdir)
    except ValueError as exc:
        fail_usage(str(exc))
    from ..report import written_files

    _print_report(data)
    _say("wrote " + ", ".join(str(workdir / name) for name in written_files(data))
         + ("" if "roofline.png" in written_files(data) else " (no roofline chart: no GPU timings)"))
    _say_other_runs(workdir, "report")
    raise typer.Exit(EXIT_OK)


def _switch_run(workdir: Path, run: Optional[str]) -> None:
    if run is None:
        return
    from ..loop.workspace import WorkspaceError, current_run_name, switch_run

    if current_run_name(workdir) == run:
        return
    try:
        switch_run(workdir, run)
    except WorkspaceError as exc:
        fail_usage(str(exc))


def _say_other_runs(workdir: Path, command: str) -> None:
    """Name the runs on other branches of the directory, which this command did not read."""
    from ..loop.workspace import current_run_name, run_names, run_problems

    here = current_run_name(workdir)
    others = [name for name in run_names(workdir) if name != here]
    if not others:
        return
    listed = "; ".join(f"{name} ({', '.join(run_problems(workdir, name)) or 'no kernels yet'})" for name in others)
    _say(f"this was run {here!r}; {workdir} also holds {listed}: `autokernel {command} {workdir} --run NAME`")


def export_cmd(
    workdir: Path = typer.Argument(..., help="The run directory."),
    format: str = typer.Option("files", "--format", help="files | package."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default DIR/export/FORMAT)."),
    run: Optional[str] = typer.Option(None, "--run", help=RUN_HELP),
) -> None:
    """Copy the best kernels out: plain files with a README, or a small installable package."""
    from ..export import export

    check_run_dir(workdir)
    if out is not None:
        check_writable_dir(out, "--out")
    _switch_run(workdir, run)
    try:
        dest, written = export(workdir, format, out)
    except ValueError as exc:
        fail_usage(str(exc))
    _say(f"exported {len(written)} file(s) to {dest}")
    _warn_interpreter_tuned(workdir)
    _say_other_runs(workdir, "export")
    raise typer.Exit(EXIT_OK)


def _warn_interpreter_tuned(workdir: Path) -> None:
    from ..export import exported_kernels
    from ..provenance import gpu_use_warning

    # the kernels exported, not every problem folder: a starter the budget never judged is not shipped
    names = sorted(k.problem for k in exported_kernels(workdir))
    message = gpu_use_warning(workdir, names)
    if message:
        print(f"autokernel: warning: {message}; on a GPU they are correct but not tuned for it",
              file=sys.stderr)


