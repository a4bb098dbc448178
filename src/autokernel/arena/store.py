"""Results of an arena run, one JSON file per problem under ``<out>/results/`` so that an
interrupted run resumes where it stopped (a level is hours of work)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..files import write_text_atomic
from .records import ProblemResult


def result_path(out_dir: Path, problem_file: Path) -> Path:
    return out_dir / "results" / f"{problem_file.stem}.json"


def load(out_dir: Path, problem_file: Path) -> ProblemResult | None:
    """The stored result for ``problem_file``, or None (none yet, or unreadable)."""
    try:
        return ProblemResult.from_dict(json.loads(result_path(out_dir, problem_file).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def save(out_dir: Path, problem_file: Path, result: ProblemResult) -> Path:
    path = result_path(out_dir, problem_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(result.to_dict(), indent=1, default=str))
    return path


def basis(problem_file: Path, solution: Path | None, settings: Any) -> str:
    """What a stored result was judged from: the problem's text, the solution's text (None with
    the optimize loop, whose kernel is the result) and the judge's settings.  A result whose
    basis differs is judged again: a solution fixed since, or another ``--scale``."""
    digest = hashlib.sha256()
    for path in (problem_file, solution):
        try:
            digest.update(path.read_bytes() if path is not None else b"-")
        except OSError:
            digest.update(b"unreadable")
        digest.update(b"\0")
    digest.update(repr(settings).encode())
    return digest.hexdigest()[:16]
