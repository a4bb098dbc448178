"""Shared CLI helpers."""
from __future__ import annotations

import sys
from typing import NoReturn

import typer

EXIT_OK = 0
EXIT_VERDICT = 1  # the kernel is not correct: a verdict, not a crash
EXIT_USAGE = 2  # bad usage or bad input


def fmt_or_dash(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    """A number for a table cell; "-" when there is none."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


def fail_usage(message: str) -> NoReturn:
    """One line on stderr, exit 2, nothing written."""
    print(f"autokernel: error: {message}", file=sys.stderr)
    raise typer.Exit(EXIT_USAGE)


def parse_shapes(problem, texts) -> list:
    """``--shape`` values for ``problem`` (ValueError on a bad one).  A KernelBench problem's
    inputs come from its own ``get_inputs()``: a shape given for it is refused, not ignored."""
    texts = list(texts or [])
    if texts and str(problem.kind).startswith("kernelbench:"):
        raise ValueError(f"--shape does not apply to the KernelBench problem {problem.kind.split(':', 1)[1]}: "
                         f"its inputs come from its get_inputs(); edit the file to change them")
    return [problem.parse_shape(t) for t in texts]
