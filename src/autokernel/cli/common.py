"""Shared CLI helpers."""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator, NoReturn

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


@contextlib.contextmanager
def says_when_interrupted(what: str) -> Iterator[None]:
    """Ctrl-C inside the block ends the command with one line saying ``what`` and exit 130
    (typer turns a KeyboardInterrupt into exit 130 with nothing said)."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"autokernel: interrupted; {what}", file=sys.stderr)
        raise typer.Exit(130) from None


def parse_shapes(problem, texts) -> list:
    """``--shape`` values for ``problem`` (ValueError on a bad one).  A KernelBench problem's
    inputs come from its own ``get_inputs()``: a shape given for it is refused, not ignored."""
    texts = list(texts or [])
    if texts and str(problem.kind).startswith("kernelbench:"):
        raise ValueError(f"--shape does not apply to the KernelBench problem {problem.kind.split(':', 1)[1]}: "
                         f"its inputs come from its get_inputs(); edit the file to change them")
    return [problem.parse_shape(t) for t in texts]


def parse_gpus(text: str | None) -> list[int] | None:
    """``--gpus 0,2,5`` → [0, 2, 5]; None when not given.  Raises ValueError on anything else."""
    if text is None:
        return None
    try:
        gpus = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--gpus {text!r}: give GPU indices separated by commas, e.g. --gpus 0,2,5") from None
    if not gpus:
        raise ValueError("--gpus needs at least one GPU index, e.g. --gpus 0,2")
    return gpus


def check_scale_flags(parallel: int | None, gpus: str | None, ray: str | None) -> list[int] | None:
    """The checks of --parallel/--gpus/--ray that need no GPU and no cluster (exit 2 on a mistake)."""
    if parallel is not None and parallel < 1:
        fail_usage("--parallel must be at least 1")
    if ray is not None and not ray.strip():
        fail_usage("--ray needs an address (host:port, ray://host:port, auto) or local")
    try:
        return parse_gpus(gpus)
    except ValueError as exc:
        fail_usage(str(exc))


def config_overrides(items: list[str] | None) -> dict[str, str]:
    """Every ``--config key=value[,key=value]`` given (the option repeats), merged in order."""
    from ..models import ModelSpecError, parse_config_overrides

    out: dict[str, str] = {}
    for item in items or []:
        try:
            out.update(parse_config_overrides(item))
        except ModelSpecError as exc:
            fail_usage(str(exc))
    return out


def check_writable_dir(path, flag: str, file=None) -> None:
    """Refuse (exit 2, one line) a directory that cannot be created or written, before any work:
    a run that profiled for minutes then died on ``--workdir /proc/x`` with a traceback.  What is
    created to find out is removed again.  ``file``: the path given, a file to write in ``path``
    (``profile --out /proc/plan.json`` named /proc alone, as if /proc were what was given)."""
    import tempfile
    from pathlib import Path

    path = Path(path)
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    try:
        for d in reversed(missing):
            d.mkdir()
        if not path.is_dir():
            fail_usage(f"{flag} {path}: not a directory")
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        where = "there" if file is None else f"in its directory {path}"
        fail_usage(f"{flag} {file or path}: cannot write {where} ({exc.strerror or exc})")
    finally:
        for d in missing:
            try:
                d.rmdir()
            except OSError:
                pass


def check_run_dir(path) -> None:
    """A run directory argument that is missing or is a file: one line, exit 2."""
    from pathlib import Path

    path = Path(path)
    if path.is_file():
        fail_usage(f"{path} is a file, not a run directory: give the directory that `autokernel run` or "
                   f"`autokernel optimize` wrote (its --workdir)")
    if not path.is_dir():
        fail_usage(f"workdir not found: {path}")
