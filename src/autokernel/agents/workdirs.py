"""Where agents write their logs: never into the committed tree."""
from __future__ import annotations

import subprocess
from pathlib import Path

from .base import Context


def agent_log_dir(context: Context) -> Path:
    """``context.extra["log_dir"]`` when the loop gives one, else
    ``<git toplevel>/logs/agents/<problem dir name>/``.  Either way the directory holds a
    ``.gitignore`` of ``*``, so nothing in it can be committed by accident."""
    given = (context.extra or {}).get("log_dir")
    if given:
        path = Path(given)
    else:
        path = git_toplevel(context.problem_dir) / "logs" / "agents" / context.problem_dir.name
    path.mkdir(parents=True, exist_ok=True)
    ignore = path / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    return path.resolve()


def git_toplevel(path: Path) -> Path:
    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True)
    if proc.returncode == 0 and proc.stdout.strip():
        return Path(proc.stdout.strip())
    return Path(path)
