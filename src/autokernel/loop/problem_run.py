"""The loop's memory of one problem during a run, rebuilt from the workspace on resume."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..files import write_text_atomic
from ..orchestrator import ProblemState, after_experiment, park_reason
from .results import ExperimentRecord
from .targets import OptimizeError, Target
from .verdict import FAILURE_STATUSES, make_record
from .workspace import ProblemFile, Workspace

# Proposals in a row that the agent could not make into a new kernel file (the current kernel
# sent back, no code block, ...), after which the loop is done with the problem: a model stuck on
# one answer would otherwise pay a request per rejected row until the budget ends.
MAX_UNEVALUATED_IN_A_ROW = 25


@dataclass
class ProblemRun:
    target: Target
    problem: Any
    start_source: str | None
    rows: list[ExperimentRecord] = field(default_factory=list)
    best_eval: Any = None
    start_eval: Any = None
    last_failure: dict[str, str] | None = None
    evaluator: Any = None  # the serial loop's in-process evaluator
    state: ProblemState | None = None
    note: str = ""
    unevaluated_in_a_row: int = 0  # this invocation's proposals in a row that were no kernel file

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def baseline(self) -> ExperimentRecord | None:
        return next((r for r in self.rows if r.status == "baseline"), None)

    @property
    def best_row(self) -> ExperimentRecord | None:
        kept = [r for r in self.rows if r.status == "keep"]
        return kept[-1] if kept else self.baseline

    @property
    def best_correct(self) -> bool:
        row = self.best_row
        return row is not None and row.correct

    @property
    def experiments(self) -> int:
        return sum(1 for r in self.rows if r.status != "baseline")

    @property
    def keeps(self) -> int:
        """How many times the incumbent changed (its version, for judging in parallel)."""
        return sum(1 for r in self.rows if r.status == "keep")

    @property
    def next_experiment(self) -> int:
        return max((r.experiment for r in self.rows), default=-1) + 1

    def evaluator_kwargs(self, device: str, timeout_s: float) -> dict:
        t = self.target
        return dict(device=device, shapes=t.shapes, dtypes=[t.dtype] if t.dtype else None, timeout_s=timeout_s,
                    weights=t.weights, stop_at_loss=True)

    def record(self, experiment: int, agent_name: str, status: str, evaluation, wall_s: float, tokens: int,
               commit: str, description: str) -> ExperimentRecord:
        return make_record(self.problem, self.name, self.baseline, self.best_row, experiment, agent_name, status,
                           evaluation, wall_s, tokens, commit, description)

    def remember(self, record: ExperimentRecord, evaluation, description: str, reason: str = "") -> None:
        """After ``record`` was written: the rows, the best evaluation and the last failure."""
        self.rows.append(record)
        self.unevaluated_in_a_row = self.unevaluated_in_a_row + 1 if evaluation is None and record.status != "baseline" else 0
        if record.status == "keep":
            self.best_eval = evaluation
        if record.status == "baseline":
            self.start_eval = self.best_eval = evaluation
            if not evaluation.correct:
                self.last_failure = {"status": evaluation.verdict, "stage": evaluation.failed_stage or "",
                                     "message": evaluation.message, "description": description}
        elif record.status in ("keep", "revert"):
            self.last_failure = None
        else:
            message = evaluation.message if evaluation is not None else reason
            # the stage from the evaluation: a timeout's row says only "timeout", the agent is told where
            stage = (evaluation.failed_stage or "") if evaluation is not None else record.failed_stage
            self.last_failure = {"status": record.status, "stage": stage, "message": message,
                                 "description": description}

    def stuck_note(self) -> str | None:
        """Why the loop is done with the problem when the agent has proposed no new kernel file
        ``MAX_UNEVALUATED_IN_A_ROW`` times in a row, else None."""
        if self.unevaluated_in_a_row < MAX_UNEVALUATED_IN_A_ROW:
            return None
        last = (self.last_failure or {}).get("message") or "no file"
        return f"the agent proposed no new kernel in {self.unevaluated_in_a_row} tries in a row (last: {last})"

    def done_if_stuck(self) -> str | None:
        """Mark the problem done (exhausted, with ``stuck_note`` as its note) the first time the
        agent is stuck on it; the note then, else None."""
        stuck = self.stuck_note()
        if stuck is None or self.state.exhausted:
            return None
        self.state = after_experiment(self.state, improved=False, seconds=0.0, exhausted=True)
        self.note = stuck
        return stuck


def setup_workspace(ws: Workspace, runs: list[ProblemRun], plan_text: str | None, tuned_on: str = "") -> None:
    """Commit results.tsv, the plan and each problem's kernel.py and problem.json when new or
    changed.  A problem already recorded with another definition is refused."""
    recorded = {r.problem for r in ws.results()}
    for run in runs:  # results are only comparable on the same problem definition
        committed = ws.committed_text(ws.problem_file(run.name))
        if committed is None or run.name not in recorded:
            continue
        old, t = ProblemFile.from_json(committed), run.target
        if (old.spec, old.shapes, old.weights, old.dtype) != (t.spec, t.shapes, t.weights, t.dtype):
            raise OptimizeError(f"problem {t.name} of run {ws.run_name} was set up with another spec, shapes, "
                                f"weights or dtype; use another --run-name (or workdir) for this one")
    ws.ensure_results()
    if plan_text is not None and ws.committed_text(ws.plan_path) != plan_text:
        write_text_atomic(ws.plan_path, plan_text)
        ws.commit([ws.plan_path], "plan.json")
    for run in runs:
        t = run.target
        kernel, pfile = ws.kernel_path(run.name), ws.problem_file(run.name)
        record = ProblemFile(name=t.name, spec=t.spec, kind=run.problem.kind, shapes=t.shapes, weights=t.weights,
                             dtype=t.dtype, fraction=t.fraction,
                             start_file=str(t.start_file) if t.start_file else None,
                             extra={"tuned_on": tuned_on} if tuned_on else {}).to_json()
        paths = []
        if ws.committed_text(kernel) is None:
            if run.start_source is None:
                raise OptimizeError(f"problem {t.name} has no starter kernel; pass a start kernel file (--kernel)")
            kernel.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(kernel, run.start_source)
            paths.append(kernel)
        if ws.committed_text(pfile) != record:
            pfile.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(pfile, record)
            paths.append(pfile)
        if paths:
            ws.commit(paths, f"setup {t.name}" if kernel in paths else f"update {t.name}/problem.json")


def restore_memory(ws: Workspace, run: ProblemRun) -> None:
    """On resume: the rows, the evaluations of the current best and the start, the last failure."""
    run.rows = ws.results(run.name)
    best, base = run.best_row, run.baseline
    if best is not None:
        run.best_eval = ws.load_evaluation(run.name, best.experiment)
    if base is not None:
        run.start_eval = ws.load_evaluation(run.name, base.experiment)
    last = run.rows[-1] if run.rows else None
    if last is not None and last.status in FAILURE_STATUSES:
        ev = ws.load_evaluation(run.name, last.experiment)
        stage = (ev.failed_stage or "") if ev is not None else last.failed_stage
        run.last_failure = {"status": last.status, "stage": stage,
                            "message": ev.message if ev is not None else "", "description": last.description}


def initial_state(run: ProblemRun, previous: ProblemState | None = None) -> ProblemState:
    since = 0
    for r in reversed(run.rows):
        if r.status in ("keep", "baseline"):
            break
        since += 1
    best = run.best_row
    return ProblemState(
        name=run.name, fraction=run.target.fraction,
        pct_roofline=best.pct_roofline if best is not None else None,
        best_speedup=best.speedup_vs_start or 1.0 if best is not None and best.correct else 1.0,
        experiments=run.experiments, since_improvement=since,
        time_spent_s=previous.time_spent_s if previous else 0.0,
        time_budget_s=previous.time_budget_s if previous else None)


def park_note(state: ProblemState | None) -> str:
    return (park_reason(state) or "") if state is not None else ""
