"""Results of an arena run, one JSON file per problem under ``<out>/results/`` so that an
interrupted run resumes where it stopped (a level is hours of work)."""
from __future__ import annotations

import json
from pathlib import Path

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
