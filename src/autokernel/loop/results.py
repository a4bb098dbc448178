"""``results.tsv``: one row per experiment, appended atomically, committed in the workspace.

Columns, in order (``COLUMNS``):

======================  =====================================================================
experiment              number per problem; 0 is the starting kernel (status ``baseline``)
problem                 the problem's directory name under ``problems/``
agent                   agent name (``tuner``, ``llm``, ``command``, ...)
status                  ``baseline`` | ``keep`` | ``revert`` | ``incorrect`` | ``timeout`` |
                        ``crash`` | ``rejected``
failed_stage            the correctness stage that failed (empty when none); ``timeout``
                        when the evaluation ran out of time, whatever stage it was in: no
                        verdict on the kernel (``timed_out`` also reads older files, which
                        wrote the stage)
latency_us              time-weighted score over the target shapes (empty when not timed)
throughput              time-weighted achieved throughput, in ``throughput_unit``
throughput_unit         ``GB/s`` (memory-bound problems) or ``TFLOP/s`` (compute-bound)
pct_roofline            percent of the roofline (empty when the ceiling is unknown, e.g. CPU)
speedup_vs_eager        eager PyTorch score / this score
speedup_vs_start        against the starting kernel: the incumbent's speedup times this
                        candidate's paired (interleaved, same-process) speedup over the
                        incumbent; baseline score / this score when there is no paired timing
wall_s                  seconds spent on the experiment (proposal + evaluation)
tokens                  model tokens the agent spent (0 for offline agents)
commit                  short hash of the workspace commit the experiment started from (the
                        incumbent it was compared with); a kept experiment's own commit is the
                        next one, whose message starts ``exp <N> <problem>:``
description             the agent's one-line description
======================  =====================================================================

Rows are written whole with one ``write`` followed by flush + fsync, so a crash leaves at most
one partial trailing line, which ``repair_results`` drops.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

COLUMNS = ("experiment", "problem", "agent", "status", "failed_stage", "latency_us", "throughput",
           "throughput_unit", "pct_roofline", "speedup_vs_eager", "speedup_vs_start", "wall_s",
           "tokens", "commit", "description")
STATUSES = ("baseline", "keep", "revert", "incorrect", "timeout", "crash", "rejected")
HEADER = "\t".join(COLUMNS) + "\n"
TIMEOUT_STAGE = "timeout"  # failed_stage of an evaluation that ran out of time
TIMEOUT_DESCRIPTION = "(timeout after"  # how a starting kernel's row describes a timeout


def _field(row, name: str) -> str:
    return (row.get(name) if isinstance(row, dict) else getattr(row, name, "")) or ""


def timed_out(row) -> bool:
    """Whether a results row (an ``ExperimentRecord`` or a dict of the file's strings) is an
    evaluation that ran out of time (on CPU: the interpreter too slow for the shapes), which
    is no verdict on the kernel.  Rows written now say so in ``failed_stage``; older files wrote
    the stage the timeout hit there, with status ``timeout`` (an experiment) or a description
    saying so (the starting kernel, status ``baseline``)."""
    status = _field(row, "status")
    return (_field(row, "failed_stage") == TIMEOUT_STAGE or status == "timeout"
            or (status == "baseline" and TIMEOUT_DESCRIPTION in _field(row, "description")))


def failure_text(row) -> str:
    """What went wrong in a row of a kernel that was not judged correct, for summaries:
    ``timed out`` or the failed stage (or the status where no stage was recorded)."""
    if timed_out(row):
        return "timed out"
    return _field(row, "failed_stage") or _field(row, "status")


@dataclass
class ExperimentRecord:
    experiment: int
    problem: str
    agent: str
    status: str
    failed_stage: str = ""
    latency_us: float | None = None
    throughput: float | None = None
    throughput_unit: str = ""
    pct_roofline: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_start: float | None = None
    wall_s: float = 0.0
    tokens: int = 0
    commit: str = ""
    description: str = ""

    @property
    def correct(self) -> bool:
        """Whether the evaluated kernel was correct (kept, reverted for speed, or a passing baseline)."""
        return self.status in ("keep", "revert") or (self.status == "baseline" and not self.failed_stage
                                                      and self.latency_us is not None)

    def to_line(self) -> str:
        return "\t".join(_format(getattr(self, c)) for c in COLUMNS) + "\n"

    def to_row(self) -> dict[str, str]:
        """The row as the strings written to the file (what agents see as history)."""
        return {c: _format(getattr(self, c)) for c in COLUMNS}

    @classmethod
    def from_line(cls, line: str) -> "ExperimentRecord":
        values = line.rstrip("\n").split("\t")
        if len(values) != len(COLUMNS):
            raise ValueError(f"results row has {len(values)} fields, expected {len(COLUMNS)}")
        kinds = {f.name: f.type for f in fields(cls)}
        kw = {}
        for name, value in zip(COLUMNS, values):
            kw[name] = _parse(value, str(kinds[name]))
        return cls(**kw)


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.1f}"
    return " ".join(str(value).replace("\t", " ").splitlines())


def _parse(value: str, type_name: str):
    if type_name == "int":
        return int(value) if value else 0
    if type_name == "float":
        return float(value) if value else 0.0
    if type_name.startswith("float"):  # float | None
        return float(value) if value else None
    return value


def ensure_results(path: Path) -> None:
    """Create the file with its header when absent."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        _write_durably(path, HEADER, mode="w")


def repair_results(path: Path) -> bool:
    """Drop a trailing partial line (a row whose write was cut off).  True when it changed the file."""
    path = Path(path)
    if not path.exists():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as fh:
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())
    return True


def read_results(path: Path, problem: str | None = None) -> list[ExperimentRecord]:
    """All complete rows (optionally of one problem), oldest first.  A partial trailing line
    and malformed rows are skipped."""
    path = Path(path)
    if not path.exists():
        return []
    return parse_results(path.read_text(), problem)


def parse_results(text: str, problem: str | None = None) -> list[ExperimentRecord]:
    """``read_results`` on the text of a results file."""
    records = []
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n") or line == HEADER or not line.strip():
            continue
        try:
            record = ExperimentRecord.from_line(line)
        except ValueError:
            continue
        if problem is None or record.problem == problem:
            records.append(record)
    return records


def append_result(path: Path, record: ExperimentRecord) -> None:
    """Append one row: the whole line in one write, then flush and fsync."""
    if record.status not in STATUSES:
        raise ValueError(f"unknown status {record.status!r}")
    ensure_results(path)
    _write_durably(Path(path), record.to_line(), mode="a")


def _write_durably(path: Path, text: str, mode: str) -> None:
    with open(path, mode, encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
