"""`autokernel problems` (the built-in kinds) and `autokernel starter KIND` (a starter file)."""
from __future__ import annotations

import sys

import typer

from .common import fail_usage


def problems() -> None:
    """List the built-in problem kinds: signature, GPU target shapes, dtypes."""
    from rich.console import Console
    from rich.table import Table

    from ..problems import get_problem, list_kinds
    from ..problems.base import dtype_name, format_shape

    from rich import box

    table = Table(title="autokernel problem kinds (or --problem PATH: a problem file or a KernelBench file)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True,
                  show_edge=False)
    for column in ("kind", "signature", "GPU shapes", "dtypes"):
        table.add_column(column, overflow="fold")
    for kind in list_kinds():
        try:
            problem = get_problem(kind)
        except Exception as exc:  # a kind whose module is missing must not hide the others
            table.add_row(kind, f"(unavailable: {type(exc).__name__})", "", "")
            continue
        dims = "x".join(problem.dims)
        shapes = ", ".join(format_shape(s) for s in problem.gpu_shapes)
        table.add_row(kind, problem.signature, f"{dims}: {shapes}",
                      ", ".join(dtype_name(d) for d in problem.dtypes))
    Console().print(table)


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
