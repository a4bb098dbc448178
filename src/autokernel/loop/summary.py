"""What a run reports when it stops: per problem, and the throughput of the run itself."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import figures
from .problem_run import ProblemRun, park_note
from .workspace import Workspace


@dataclass
class ProblemSummary:
    name: str
    kind: str
    experiments: int  # all experiments recorded for the problem (baseline excluded)
    kept: int
    start_score_us: float | None
    best_score_us: float | None
    speedup_vs_start: float | None
    speedup_vs_eager: float | None
    pct_roofline: float | None
    best_kernel: Path
    fraction: float | None = None
    timing_kind: str = ""  # "gpu" | "interpreter"
    note: str = ""  # why the problem stopped, when known


@dataclass
class OptimizeSummary:
    problems: list[ProblemSummary]
    stopped_reason: str  # one of STOP_REASONS
    workdir: Path
    branch: str
    run_name: str
    experiments_run: int = 0  # experiments in this invocation (rows written, rejected proposals included)
    rejected_run: int = 0  # of those, proposals rejected before any evaluation (no kernel, agent error)
    wall_s: float = 0.0
    message: str = ""  # extra words on why it stopped (e.g. the agent's reason)
    recovered: list[str] = field(default_factory=list)  # what recovery did at startup
    parallel: int = 1  # experiments in flight at most
    lanes: list[str] = field(default_factory=list)  # where evaluations ran ("gpu0", "cpu1", "ray:0")
    lane_busy_s: list[float] = field(default_factory=list)  # seconds each lane had an evaluation running
    evaluation_s: list[float] = field(default_factory=list)  # wall seconds of each evaluation this run
    unreachable_s: float = 0.0  # how long the agent's model endpoint was unreachable in this run
    outages: int = 0  # how many times it went away

    @property
    def evaluations_per_hour(self) -> float | None:
        """Evaluations the judge ran per hour (starting kernels included, rejected proposals not:
        they never reached it)."""
        return per_hour(len(self.evaluation_s), self.wall_s)

    @property
    def utilisation(self) -> list[float]:
        """Per lane: share of this run's wall time with an evaluation running on it."""
        return [min(b / self.wall_s, 1.0) if self.wall_s > 0 else 0.0 for b in self.lane_busy_s]

    @property
    def mean_evaluation_s(self) -> float | None:
        return sum(self.evaluation_s) / len(self.evaluation_s) if self.evaluation_s else None


def per_hour(count: int, wall_s: float) -> float | None:
    """``count`` events in ``wall_s`` seconds, per hour (None without a wall time)."""
    return 3600.0 * count / wall_s if wall_s > 0 else None


def summarize_problem(ws: Workspace, run: ProblemRun, device: str) -> ProblemSummary:
    rows = ws.results(run.name)
    kept = [r for r in rows if r.status == "keep"]
    best = figures.best_of(rows)
    start, best_us = figures.start_and_best(rows)
    timing_kind = (run.best_eval.timing_kind if run.best_eval is not None and run.best_eval.timing_kind
                   else ("gpu" if device.startswith("cuda") else "interpreter"))
    return ProblemSummary(
        name=run.name, kind=run.problem.kind, experiments=sum(1 for r in rows if r.status != "baseline"),
        kept=len(kept), start_score_us=start, best_score_us=best_us,
        speedup_vs_start=figures.vs_start(start, best_us),
        speedup_vs_eager=best.speedup_vs_eager if best is not None and best.correct else None,
        pct_roofline=best.pct_roofline if best is not None and best.correct else None,
        best_kernel=ws.kernel_path(run.name), fraction=run.target.fraction, timing_kind=timing_kind,
        note=run.note or park_note(run.state))


def agent_unreachable_s(agent) -> float:
    """How long the agent's model endpoint was unreachable in this run (0 for agents without one)."""
    seconds = getattr(agent, "unreachable_seconds", None)
    return round(float(seconds()), 3) if callable(seconds) else 0.0


def unreachable_text(summary: OptimizeSummary) -> str:
    """``model endpoint unreachable 2 times, 14m05s in all`` (empty when it never was)."""
    if not summary.outages:
        return ""
    from .budget import format_duration

    times = "once" if summary.outages == 1 else f"{summary.outages} times"
    return f"model endpoint unreachable {times}, {format_duration(summary.unreachable_s)} in all"


def throughput_text(summary: OptimizeSummary) -> str:
    """``41 evaluations/h; evaluation 12.3 s mean; gpu0 78% gpu1 75% busy`` (empty when nothing
    ran), with ``3 proposal(s) rejected unevaluated`` where the agent gave no kernel."""
    if not summary.experiments_run and not summary.evaluation_s:
        return ""
    parts = [f"{summary.evaluations_per_hour or 0.0:.0f} evaluations/h"]
    if summary.rejected_run:
        parts.append(f"{summary.rejected_run} proposal(s) rejected unevaluated")
    if summary.mean_evaluation_s is not None:
        parts.append(f"evaluation {summary.mean_evaluation_s:.3g} s mean")
    if summary.lanes:
        parts.append(" ".join(f"{lane} {100 * u:.0f}%" for lane, u in zip(summary.lanes, summary.utilisation))
                     + " busy")
    return "; ".join(parts)


THROUGHPUT_LOG = "logs/throughput.jsonl"  # one line per optimize invocation (git-ignored)


def log_throughput(workdir: Path, summary: OptimizeSummary) -> None:
    """Append this invocation's throughput to ``logs/throughput.jsonl`` (for the report)."""
    import json
    import os

    if not summary.experiments_run and not summary.evaluation_s and not summary.outages:
        return
    entry = {"run_name": summary.run_name, "wall_s": round(summary.wall_s, 3),
             "experiments": summary.experiments_run, "evaluations": len(summary.evaluation_s),
             "rejected": summary.rejected_run, "parallel": summary.parallel, "lanes": summary.lanes,
             "lane_busy_s": summary.lane_busy_s,
             "mean_evaluation_s": round(summary.mean_evaluation_s, 4) if summary.mean_evaluation_s else None}
    if summary.outages:
        entry.update(unreachable_s=round(summary.unreachable_s, 3), outages=summary.outages)
    path = Path(workdir) / THROUGHPUT_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def throughput_entries(workdir: Path, run_name: str | None = None) -> list[dict]:
    """The lines of ``logs/throughput.jsonl`` (one per optimize invocation), only ``run_name``'s
    when given: the log is the workdir's, shared by every run it holds."""
    import json

    path = Path(workdir) / THROUGHPUT_LOG
    entries = []
    for line in (path.read_text().splitlines() if path.is_file() else []):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and (run_name is None or entry.get("run_name") == run_name):
            entries.append(entry)
    return entries


def throughput_markdown(workdir: Path, run_name: str | None = None) -> list[str]:
    """The report's section: per optimize invocation (of ``run_name`` when given), evaluations
    per hour, mean evaluation time and each lane's utilisation (share of wall time with an
    evaluation running on it)."""
    entries = throughput_entries(workdir, run_name)
    if not entries:
        return []
    lines = ["## Throughput", "",
             "Evaluations: kernels the judge ran (correctness and timing), starting kernels included; an "
             "experiment whose proposal was rejected before judging (no kernel, an agent error) is not one. "
             "Utilisation: share of the wall time with an evaluation running on the lane.",
             "", "| run | in flight | experiments | evaluations | wall | evaluations/h | evaluation (mean) | "
             "utilisation per lane |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for e in entries:
        wall = float(e.get("wall_s") or 0.0)
        evaluations = e.get("evaluations")  # absent from lines written before 2026-12-07
        rate = per_hour(int(evaluations), wall) if evaluations is not None else None
        lanes = ", ".join(f"{name} {100 * min(busy / wall, 1.0):.0f}%" for name, busy in
                          zip(e.get("lanes", []), e.get("lane_busy_s", []))) if wall > 0 else "—"
        mean = e.get("mean_evaluation_s")
        cells = [e.get("run_name", ""), e.get("parallel", 1), e.get("experiments", 0),
                 "—" if evaluations is None else evaluations, f"{wall:.0f} s", "—" if rate is None else f"{rate:.0f}",
                 f"{mean:.3g} s" if mean else "—", lanes or "—"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines + [""]


def unreachable_note(workdir: Path, run_name: str | None = None) -> str:
    """For the report: how long the model endpoint was unreachable over every invocation (of
    ``run_name`` when given; empty when it never was)."""
    from .budget import format_duration

    seconds, outages = 0.0, 0
    for entry in throughput_entries(workdir, run_name):
        try:
            seconds += float(entry.get("unreachable_s") or 0.0)
            outages += int(entry.get("outages") or 0)
        except (ValueError, TypeError):
            continue
    if not outages:
        return ""
    return (f"model endpoint unreachable {'once' if outages == 1 else f'{outages} times'}, "
            f"{format_duration(seconds)} in all (no experiment was recorded while it was)")
