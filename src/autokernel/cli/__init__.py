"""The `autokernel` command.  Thin: each sub-module registers its commands on the app, parses
arguments, calls library code and prints.  User mistakes exit 2 with one line on stderr."""
from __future__ import annotations

import typer

from . import arena_cmd, bench_cmd, optimize_cmd, pipeline_cmd, problems_cmd, profile_cmd

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Make PyTorch models faster by optimizing their GPU kernels autonomously.")

for _module in (problems_cmd, bench_cmd, optimize_cmd, profile_cmd, pipeline_cmd, arena_cmd):
    _module.register(app)


def main() -> None:
    app()
