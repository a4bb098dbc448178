"""`autokernel problems` (the built-in kinds) and `autokernel starter KIND` (a starter file)."""
from __future__ import annotations

import sys

import typer

from .common import fail_usage


def problems() -> None:
    """List the built-in problem kinds: signature, GPU target shapes, dtypes."""
    import shutil
    import textwrap

    from ..problems import get_problem, list_kinds
    from ..problems.base import dtype_name, format_shape

    width = max(40, min(shutil.get_terminal_size((80, 24)).columns, 100))

    def say(text: str, indent: str, more: str) -> None:
        for line in textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=more,
                                  break_long_words=False, break_on_hyphens=False):
            print(line)

    say("autokernel problem kinds (or --problem PATH: a problem file or a KernelBench file)", "", "")
    for kind in list_kinds():
        print()
        try:
            problem = get_problem(kind)
        except Exception as exc:  # a kind whose module is missing must not hide the others
            print(f"{kind}  (unavailable: {type(exc).__name__})")
            continue
        print(f"{kind}  ({', '.join(dtype_name(d) for d in problem.dtypes)})")
        call, _, comment = problem.signature.partition("  # ")
        say(call, "  ", "      ")
        if comment:
            say(f"# {comment}", "  ", "    ")
        shapes = ", ".join(format_shape(s) for s in problem.gpu_shapes)
        say(f"GPU shapes {'x'.join(problem.dims)}: {shapes}", "  ", "    ")


def starter(kind: str = typer.Argument(..., help="problem kind, e.g. matmul")) -> None:
    """Print the starter kernel file of KIND on stdout."""
    from ..problems import ProblemError, starter_source

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
