"""The `autokernel` command.  Thin: each sub-module registers its commands on the app, parses
arguments, calls library code and prints.  User mistakes exit 2 with one line on stderr."""
from __future__ import annotations

import typer
from typer.core import TyperCommand

from . import arena_cmd, bench_cmd, optimize_cmd, pipeline_cmd, problems_cmd, profile_cmd
from .common import fail_usage

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Make PyTorch models faster by optimizing their GPU kernels autonomously.")


class _Command(TyperCommand):
    """A command whose help lists a flag as a flag: typer's rich help gave every option its type,
    so each flag read ``--no-compile <bool>`` (``--help`` too), as if it took a value."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""  # shown in the type column: nothing
        return params


for _module in (problems_cmd, bench_cmd, optimize_cmd, profile_cmd, pipeline_cmd, arena_cmd):
    _module.register(app)
for _info in app.registered_commands:
    if _info.cls in (None, TyperCommand):  # typer 0.29 names its own class; older ones None
        _info.cls = _Command


@app.callback()
def _check_environment() -> None:
    """Settings read from the environment are checked before any command runs: a typo in one is a
    usage error here, not a traceback (or a silent default) deep inside an overnight run."""
    from ..harness.compile_ahead import helpers_asked

    try:
        helpers_asked()
    except ValueError as exc:
        fail_usage(str(exc))


def _click_exceptions():
    try:  # typer >= 0.20 carries its own copy of click
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def _abort_types() -> tuple:
    found = []
    for module in ("typer.exceptions", "click.exceptions"):
        try:
            found.append(getattr(__import__(module, fromlist=["Abort"]), "Abort"))
        except (ImportError, AttributeError):
            continue
    return tuple(found) or (KeyboardInterrupt,)


def main() -> None:
    """Run the app; a usage mistake (a typo'd flag, a missing value) is one line on stderr and exit 2."""
    import sys

    from ..quiet import silence_dead_peer_threads, silence_interpreter_warnings, silence_xielu_notice

    silence_interpreter_warnings()
    silence_dead_peer_threads()
    silence_xielu_notice()
    exc_types = _click_exceptions()
    try:
        code = app(standalone_mode=False)
    except exc_types.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help was printed
            sys.exit(2)
        print(f"autokernel: error: {exc.format_message()} (see --help)", file=sys.stderr)
        sys.exit(2)
    except _abort_types() as exc:  # end of input where an answer was expected
        print("autokernel: aborted", file=sys.stderr)
        sys.exit(130 if isinstance(exc.__cause__, KeyboardInterrupt) else 1)
    except exc_types.ClickException as exc:
        print(f"autokernel: error: {exc.format_message()}", file=sys.stderr)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
