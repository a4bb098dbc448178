"""Which problem files to run, and which solution file answers each."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence


class ArenaUsageError(ValueError):
    """A user mistake in the arena's arguments (the CLI exits 2)."""


def _order(path: Path) -> tuple:
    match = re.match(r"(\d+)_", path.name)
    return (int(match.group(1)) if match else 10 ** 9, path.name)


def find_problems(specs: Sequence[str]) -> list[Path]:
    """Problem files from directories (every ``*.py`` in them, KernelBench's numeric order) and
    file paths, without duplicates."""
    out: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            out.extend(sorted((p for p in path.glob("*.py") if not p.name.startswith("_")), key=_order))
        elif path.is_file() and path.suffix == ".py":
            out.append(path)
        else:
            raise ArenaUsageError(f"not a problem file or directory: {spec}")
    seen: set[Path] = set()
    unique = [p for p in out if not (p.resolve() in seen or seen.add(p.resolve()))]
    if not unique:
        raise ArenaUsageError("no problem files (*.py) in " + ", ".join(specs))
    return unique


def solution_for(problem: Path, solutions: Path) -> Path | None:
    """The solution file named like the problem file (``19_ReLU.py``), or None."""
    candidate = solutions / problem.name
    return candidate if candidate.is_file() else None
