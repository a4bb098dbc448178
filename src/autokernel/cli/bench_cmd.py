"""`autokernel bench KERNEL_FILE --problem KIND|PATH` and `autokernel calibrate`.

bench: judge one kernel file with the harness.  Exit 0 when the kernel is correct, 1 when it
is not (incorrect, rejected, timeout, crash — including a file that does not parse or lacks
``kernel_fn``: that is a verdict), 2 for bad usage (unknown kind, missing file, malformed
shape or dtype, ``--device cuda`` without a GPU), with one line ``autokernel: error: ...`` on
stderr.  ``--json`` prints exactly one JSON object (the Evaluation record) on stdout; anything
else printed while judging goes to stderr.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Iterator, List, Optional

import typer

from .common import EXIT_OK, EXIT_VERDICT, fail_usage, fmt_or_dash, parse_shapes, says_when_interrupted


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Keep stdout clean for the one JSON object: point fd 1 at stderr meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _split(values: Optional[List[str]]) -> list[str]:
    out: list[str] = []
    for value in values or []:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def bench(
    kernel_file: Optional[str] = typer.Argument(None, help="the kernel file to judge"),
    problem: Optional[str] = typer.Option(None, "--problem", "-p", help="problem kind or problem file"),
    device: str = typer.Option("auto", "--device", help="auto, cuda or cpu"),
    dtype: Optional[List[str]] = typer.Option(None, "--dtype", help="dtype(s): bf16, fp16, fp32 (repeat or comma list)"),
    shape: Optional[List[str]] = typer.Option(None, "--shape", help="target shape, e.g. 4096x4096 (repeatable)"),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds each call of the kernel may take"),
    json_out: bool = typer.Option(False, "--json", help="print the Evaluation record as one JSON object"),
    no_baselines: bool = typer.Option(False, "--no-baselines", help="skip the eager / torch.compile baselines"),
    against: Optional[str] = typer.Option(None, "--against", help="another kernel file, timed interleaved with "
                                          "KERNEL_FILE: which is faster beyond the noise"),
    allow_torch: bool = typer.Option(False, "--allow-torch", help="KernelBench files: KernelBench's lenient rule "
                                     "(only the reference's own ops are refused) instead of no PyTorch compute"),
    atol: Optional[float] = typer.Option(None, "--atol", help="KernelBench files: absolute tolerance (default 1e-4 fp32)"),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="KernelBench files: relative tolerance (default 1e-4 fp32)"),
    compile_timeout: float = typer.Option(600.0, "--compile-timeout", help="seconds importing the kernel file may "
                                          "take (load_inline builds; never less than --timeout)"),
) -> None:
    """Judge KERNEL_FILE: correctness stages, integrity checks, then timing."""
    if not kernel_file:
        fail_usage("missing KERNEL_FILE (usage: autokernel bench KERNEL_FILE --problem KIND|PATH)")
    if not problem:
        fail_usage("missing --problem KIND|PATH")
    if Path(kernel_file).is_dir():
        fail_usage(f"KERNEL_FILE is a directory: {kernel_file} (give the kernel's .py file)")
    if not Path(kernel_file).is_file():
        fail_usage(f"kernel file not found: {kernel_file}")
    if against is not None and not Path(against).is_file():
        fail_usage(f"--against file not found: {against}")
    if not timeout > 0:
        fail_usage(f"--timeout must be positive, got {timeout:g}")

    from ..harness.evaluate import Evaluator, resolve_device
    from ..harness.worker import load_problem
    from ..problems.base import parse_dtype

    if not compile_timeout > 0:
        fail_usage(f"--compile-timeout must be positive, got {compile_timeout:g}")
    try:
        prob = load_problem(problem)
        if prob.source.startswith("kernelbench:") and (allow_torch or atol is not None or rtol is not None):
            from ..problems.kernelbench import KernelBenchOptions, load_kernelbench

            prob = load_kernelbench(problem, KernelBenchOptions(allow_torch=allow_torch, atol=atol, rtol=rtol))
    except Exception as exc:  # unknown kind, a bad problem file: the user's input
        fail_usage(" ".join(str(exc).split()) or f"cannot load problem {problem!r}")
    if not prob.source.startswith("kernelbench:") and (allow_torch or atol is not None or rtol is not None):
        fail_usage("--allow-torch, --atol and --rtol apply to KernelBench problem files only")
    if against is not None:  # the file compared with: one that can never run is the user's mistake, not a verdict
        from ..loop.inputs import start_kernel_problem

        try:
            why = start_kernel_problem(prob, Path(against).read_text(), against)
        except (OSError, UnicodeDecodeError) as exc:
            why = f"cannot read {against}: {exc}"
        if why:
            fail_usage(f"--against: {why}")
    try:
        dtypes = [parse_dtype(d) for d in _split(dtype)]
        shapes = parse_shapes(prob, shape)
        dev = resolve_device(device)
    except ValueError as exc:
        fail_usage(str(exc))
    if not dev.startswith("cuda"):
        refuse_too_slow_on_cpu(prob, problem, shapes, dtypes or list(prob.dtypes), timeout)

    spec = problem if not Path(problem).is_file() else str(Path(problem).resolve())
    if prob.source.startswith("kernelbench:"):
        spec = prob  # carries the options; the worker rebuilds it from its file
    with _stdout_to_stderr() if json_out else contextlib.nullcontext(), says_when_interrupted("no verdict"):
        with Evaluator(spec, device=dev, shapes=shapes or None, dtypes=dtypes or None, timeout_s=timeout,
                       baselines=not no_baselines, compile_timeout_s=compile_timeout) as evaluator:
            evaluation = evaluator.evaluate(kernel_file, incumbent_file=against)
    if json_out:
        sys.stdout.write(json.dumps(evaluation.to_dict(), default=str) + "\n")
    else:
        print_evaluation(evaluation)
    raise typer.Exit(EXIT_OK if evaluation.correct else EXIT_VERDICT)


def refuse_too_slow_on_cpu(prob, spec: str, shapes, dtypes, timeout: float, optimizing: bool = False) -> None:
    """On CPU: ``shapes`` (a --shape) the interpreter cannot judge within ``timeout``, or a
    KernelBench file at its own sizes that it cannot (its inputs alone may not fit in memory),
    refused up front; for ``optimize`` the remedy names the arena's optimize loop, which scales."""
    if shapes:
        _refuse_interpreter_too_slow(prob, shapes, dtypes, timeout)
    elif prob.source.startswith("kernelbench:"):
        how = ("--optimize --agent llm|command --budget-per-problem 30m" if optimizing
               else "--solutions DIR")
        _refuse_interpreter_too_slow(prob, list(prob.shapes_for("cpu")), dtypes, timeout,
                                     remedy=f"scaled down on this CPU with autokernel arena {spec} {how} "
                                            f"--scale 0.01 --device cpu")


def _refuse_interpreter_too_slow(prob, shapes, dtypes, timeout: float, remedy: str | None = None) -> None:
    """On CPU, a shape the interpreter cannot run within --timeout would only time out, and a
    timeout says nothing about the kernel: refuse it up front and say what to do (``remedy``
    instead of smaller shapes and a longer --timeout)."""
    from ..interpreter_cost import CALLS_PER_TIMEOUT, too_slow
    from ..problems.base import format_shape

    worst = too_slow(prob, shapes, dtypes, timeout)
    if worst is None:
        return
    remedy = remedy or (f"use smaller shapes (leave out --shape for the CPU defaults), or allow --timeout "
                        f"{CALLS_PER_TIMEOUT * worst.seconds_per_call:.0f} or more")
    fail_usage(f"shape {format_shape(worst.shape)} is too large for the Triton interpreter on CPU (about "
               f"{worst.seconds_per_call:.0f} s per kernel call, --timeout {timeout:g} s): it would time out "
               f"whatever the kernel; judge it on a GPU, or {remedy}")


def print_evaluation(ev) -> None:
    from ..problems.base import format_shape

    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    colour = {"pass": "green", "incorrect": "red", "rejected": "magenta", "timeout": "yellow", "crash": "red", "slower": "yellow"}
    console.print(f"[bold]{ev.kernel_file}[/bold]  problem [bold]{ev.problem}[/bold]  on {ev.device_name or ev.device}")
    console.print(f"verdict: [bold {colour.get(ev.verdict, 'white')}]{ev.verdict}[/]"
                  + (f" at stage {ev.failed_stage}" if ev.failed_stage else "") + f" — {ev.message}", markup=True)
    if ev.verdict == "timeout" and not str(ev.device).startswith("cuda"):
        console.print("on CPU the Triton interpreter is slow: a kernel that does not hang may still time out at "
                      "large shapes; try smaller shapes, a larger --timeout or a GPU", markup=False)
    if ev.stages:
        table = Table(title="correctness stages")
        for column in ("stage", "ok", "worst error (x bound)", "worst case", "s", "message"):
            table.add_column(column, overflow="fold")
        for s in ev.stages:
            table.add_row(s.name, "[green]yes[/]" if s.passed else "[red]no[/]",
                          fmt_or_dash(s.worst_error, ".3g"), s.worst_case or "", f"{s.seconds:.2f}", s.message)
        console.print(table)
    for f in ev.integrity:
        console.print(f"[magenta]integrity[/] {f.rule}: {f.message}")
    if ev.timings:
        gpu = ev.timing_kind == "gpu"
        title = "timings (GPU, CUDA events, L2 flushed, median)" if gpu else \
            "timings (Triton interpreter wall clock: says nothing about GPU speed)"
        table = Table(title=title)
        for column in ("shape", "dtype", "latency us", "± us", "GB/s", "TFLOP/s", "% roofline", "eager us",
                       "compile us", "x eager", "x compile"):
            table.add_column(column, justify="right")
        for t in ev.timings:
            # ratios of interpreter times to PyTorch's CPU times mean nothing ("0.00x eager"): GPU only
            cells = [(t.latency_us, ".2f"), (t.spread_us, ".2f"), (t.gbps, ".0f"), (t.tflops, ".1f"),
                     (t.pct_roofline, ".1f"), (t.eager_us, ".2f"), (t.compile_us, ".2f"),
                     (t.speedup_vs_eager if gpu else None, ".2f"), (t.speedup_vs_compile if gpu else None, ".2f")]
            table.add_row(format_shape(t.shape), t.dtype, *(fmt_or_dash(v, spec) for v, spec in cells))
        console.print(table)
        line = f"score {ev.score_us:.2f} us"
        if gpu and ev.speedup_vs_eager:
            line += f", {ev.speedup_vs_eager:.2f}x eager"
        if gpu and ev.speedup_vs_compile:
            line += f", {ev.speedup_vs_compile:.2f}x torch.compile"
        if ev.pct_roofline:
            line += f", {ev.pct_roofline:.1f}% of roofline"
        console.print(line)
    if ev.vs_incumbent is not None:
        c = ev.vs_incumbent
        verdict = ("faster beyond the noise" if c.significant else
                   "not faster beyond the noise")
        console.print(f"against the other file (interleaved): {c.candidate_us:.2f} us vs {c.incumbent_us:.2f} us, "
                      f"{c.speedup:.3f}x, noise ±{100 * c.noise_frac:.1f}% — {verdict}")
    console.print(f"[dim]{ev.wall_s:.1f} s; torch {ev.versions.get('torch')}, triton {ev.versions.get('triton')}[/]")


def calibrate(json_out: bool = typer.Option(False, "--json", help="print the result as one JSON object")) -> None:
    """Measure this GPU's copy bandwidth and bf16 matmul peak; cache them for the roofline."""
    import torch

    from .. import hardware

    if not torch.cuda.is_available():
        fail_usage("calibrate needs a CUDA GPU; none is available")
    with _stdout_to_stderr() if json_out else contextlib.nullcontext():
        cal = hardware.calibrate()
    if json_out:
        sys.stdout.write(json.dumps(hardware.calibration_dict(cal)) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"ceilings of {cal.device_name} (cached in {cal.cache_file})")
    for column in ("what", "measured", "spec"):
        table.add_column(column, justify="right")
    table.add_row("copy bandwidth GB/s (read+write)", f"{cal.bandwidth_gbps:.0f}",
                  fmt_or_dash(cal.spec_bandwidth_gbps, ".0f"))
    table.add_row("bf16 matmul TFLOP/s", f"{cal.bf16_tflops:.0f}", fmt_or_dash(cal.spec_bf16_tflops, ".0f"))
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
    app.command("calibrate")(calibrate)
