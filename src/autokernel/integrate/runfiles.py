"""The files of a run that ``apply`` reads: plan.json, results.tsv, the kernel files."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Iterable

from ..plan import Plan, load_plan


class IntegrateError(ValueError):
    """A workdir that cannot be applied (user mistake, exit code 2)."""


# ------------------------------------------------------------------ the run's files
KEPT_STATUSES = ("keep", "start", "baseline")


def read_results(workdir: Path) -> list[dict[str, str]]:
    """Rows of ``<workdir>/results.tsv`` (empty when there is none)."""
    path = Path(workdir) / "results.tsv"
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return [dict(r) for r in csv.DictReader(fh, delimiter="\t")]


def as_float(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def best_rows(rows: Iterable[dict[str, str]]) -> dict[str, dict[str, str]]:
    """Per problem, the row of the kernel now at ``problems/<name>/kernel.py``: the last
    ``keep`` (each keep beat the one before), else the ``baseline`` (the starting kernel)."""
    best: dict[str, dict[str, str]] = {}
    for row in rows:
        status, name = row.get("status"), row.get("problem", "")
        if status == "keep" or (status in KEPT_STATUSES and best.get(name, {}).get("status") != "keep"):
            best[name] = row
    return best


def judged_correct(results: list[dict[str, str]], best: dict[str, dict[str, str]], name: str) -> bool:
    """Is the kernel on disk for ``name`` one the harness passed?  Without results (a workdir
    put together by hand) every kernel file counts."""
    if not results:
        return True
    row = best.get(name)
    return bool(row) and not row.get("failed_stage") and as_float(row.get("latency_us")) is not None


def kernel_path(workdir: Path, name: str) -> Path:
    return Path(workdir) / "problems" / name / "kernel.py"


def load_workdir_plan(workdir: Path) -> Plan:
    workdir = Path(workdir)
    if not workdir.is_dir():
        raise IntegrateError(f"workdir not found: {workdir}")
    path = workdir / "plan.json"
    if not path.is_file():
        spaces = sorted(p for p in (workdir / "workspaces").glob("*") if (p / "problems").is_dir())
        if (workdir / "arena.json").is_file() or spaces:  # `arena --out DIR`: a workspace per problem under it
            raise IntegrateError(f"{workdir} is an arena's results folder, not a workspace: each problem optimized "
                                 f"(--optimize) has its own under {workdir / 'workspaces'}"
                                 + (f": give one of those, e.g. {spaces[0]}" if spaces else " (none here)"))
        raise IntegrateError(f"{workdir} has no plan.json (run `autokernel profile` or `autokernel run` first)")
    return load_plan(path)


def recorded_measurement(workdir: Path, key: str, cls: type, device_name: str, digests: dict[str, str],
                         cuda_graphs: bool) -> Any:
    """``verify.json``'s record under ``key`` as a ``cls`` (a dataclass with ``device_name``,
    ``kernels`` and ``cuda_graphs``), if the last ``verify`` made it on this kind of device, with
    exactly these kernel files (``digests``: problem -> digest), in the same mode; None otherwise."""
    try:
        recorded = json.loads((Path(workdir) / "verify.json").read_text()).get(key)
        found = cls(**recorded) if isinstance(recorded, dict) else None
    except (OSError, ValueError, TypeError):
        return None
    if found is None or found.device_name != device_name or found.kernels != digests or found.cuda_graphs != cuda_graphs:
        return None
    return found
