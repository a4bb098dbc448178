"""`autokernel problems` (the built-in kinds) and `autokernel starter KIND` (a starter file)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .common import fail_usage


def problems(kinds: Optional[list[str]] = typer.Argument(None, help="only these kinds, described in full")) -> None:
    """List the built-in problem kinds: signature, GPU target shapes, dtypes.  With KINDS: only
    those, with what they compute and their CPU shapes."""
    import shutil
    import textwrap

    from ..problems import get_problem, list_kinds
    from ..problems.base import DTYPE_NAMES, dtype_name, format_shape

    known = list_kinds()
    unknown = [k for k in kinds or [] if k not in known]
    if unknown and (unknown[0].endswith(".py") or Path(unknown[0]).is_file()):
        fail_usage(f"{unknown[0]} is a problem file (or a KernelBench file), not a built-in kind: judge a kernel for it "
                   f"with `autokernel bench KERNEL --problem {unknown[0]}`, optimize with `autokernel optimize "
                   f"--problem {unknown[0]}`; `autokernel problems` lists the built-in kinds")
    if unknown:
        fail_usage(f"unknown problem kind {unknown[0]!r} (kinds: {', '.join(known)})")
    width = max(40, min(shutil.get_terminal_size((80, 24)).columns, 100))

    def say(text: str, indent: str, more: str) -> None:
        for line in textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=more,
                                  break_long_words=False, break_on_hyphens=False):
            print(line)

    if not kinds:
        say("autokernel problem kinds (or --problem PATH: a problem file or a KernelBench file)", "", "")
    for kind in kinds or known:
        print()
        try:
            problem = get_problem(kind)
        except Exception as exc:  # a kind whose module is missing must not hide the others
            print(f"{kind}  (unavailable: {type(exc).__name__})")
            continue
        print(f"{kind}  ({', '.join(dtype_name(d) for d in problem.dtypes)})")
        if kinds:
            say(problem.description, "  ", "  ")
        call, _, comment = problem.signature.partition("  # ")
        say(call, "  ", "      ")
        if comment:
            say(f"# {comment}", "  ", "    ")
        shapes = ", ".join(format_shape(s) for s in problem.gpu_shapes)
        say(f"GPU shapes {'x'.join(problem.dims)}: {shapes}", "  ", "    ")
        if kinds and problem.optional_dims:
            say(f"and, where a shape has it, after those: {', '.join(problem.optional_dims)} "
                f"({'x'.join(problem.dims)}x{'x'.join(problem.optional_dims)})", "  ", "    ")
        if kinds:
            say(f"CPU shapes: {', '.join(format_shape(s) for s in problem.cpu_shapes)}", "  ", "    ")
            others = [dtype_name(d) for d in dict.fromkeys(DTYPE_NAMES.values()) if d not in problem.dtypes]
            judged = f"judged in {', '.join(dtype_name(d) for d in problem.dtypes)} by default"
            say(judged + (f"; {', '.join(others)} with --dtype" if others else ""), "  ", "    ")


def starter(kind: str = typer.Argument(..., help="problem kind, e.g. matmul")) -> None:
    """Print the starter kernel file of KIND on stdout."""
    from ..problems import ProblemError, list_kinds, starter_source

    if kind not in list_kinds() and (kind.endswith(".py") or Path(kind).is_file()):
        fail_usage(f"{kind} is a problem file, not a built-in kind: starters ship for the built-in kinds only; write "
                   "the kernel file yourself (for a KernelBench file a ModelNew, as in "
                   "examples/kernelbench_example_kernel.py; for an autokernel problem file a kernel_fn); for a "
                   f"KernelBench file an agent can write the first: `autokernel arena {kind} --optimize --agent "
                   "llm|command ...`")
    try:
        source = starter_source(kind)
    except ProblemError as exc:
        fail_usage(str(exc))
    except OSError:
        fail_usage(f"no starter kernel file for {kind!r}")
    sys.stdout.write(source)


def register(app: typer.Typer) -> None:
    app.command("problems")(problems)
    app.command("starter")(starter)
