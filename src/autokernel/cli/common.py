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
