"""The optimization loop: propose → evaluate → keep (commit) or revert → one results row.

``run_optimize`` is the library entry point behind ``autokernel optimize`` (and the optimize
step of ``autokernel run``).  One experiment is one agent proposal, one evaluation of the
candidate against the incumbent (timed in the same worker, interleaved) and one row in
``results.tsv``.  A candidate is kept only when it is correct and faster than the incumbent
beyond the measured noise (``Evaluation.vs_incumbent.significant``); an incorrect kernel is
never kept.  The orchestrator (``autokernel.orchestrator``) picks the problem each experiment
goes to.  Everything is in the workspace (``loop/workspace.py``), so a run that stops for
any reason — budget, Ctrl-C, ``kill -9`` — resumes when the same command runs again.

With one experiment in flight (the default on CPU and on one GPU) the loop below runs
everything in this process.  With ``parallel > 1``, several GPUs or ``ray``, the scheduler
of ``loop/parallel.py`` keeps up to ``parallel`` experiments in flight over an executor
(``loop/executor.py``); rows, numbers and commits stay serial.  The parts: ``targets``
(input), ``problem_run`` (per-problem memory), ``verdict`` (keep/revert and the row's
numbers), ``progress``, ``summary``, ``interrupts``.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..agents.base import AgentConfig, AgentExhausted, AgentRefused, Context, NoProposal, Proposal
from ..files import write_text_atomic
from ..orchestrator import ProblemState, after_experiment, assign_budgets, choose
from ..provenance import tuned_on_label
from . import first_evals, interrupts
from .budget import format_duration
from .problem_run import ProblemRun, initial_state, park_note, restore_memory, setup_workspace
from .progress import Printer, progress_line
from .summary import (OptimizeSummary, ProblemSummary, agent_unreachable_s, log_throughput, summarize_problem,
                      throughput_text, unreachable_text)
from .inputs import no_start_kernel, start_kernel_problem
from .targets import (OptimizeError, Target, default_run_name, model_run_name, plan_model, resolve_device,
                      targets_from_plan)
from .results import TIMEOUT_DESCRIPTION
from .verdict import decide, speedup_vs_start
from .workspace import (Workspace, WorkspaceError, current_run_name, has_committed_kernel, open_workspace,
                        sanitize_run_name)

STOP_REASONS = ("budget", "max-experiments", "interrupted", "all-done", "agent-exhausted", "agent-refused")
EXHAUSTED_PREFIX = "search space exhausted"


def time_left(state: ProblemState | None, deadline: float | None) -> float | None:
    """Seconds this problem may still use: the run's deadline and the problem's own time
    budget, whichever ends first (None: no limit).  Agents that search (the tuner's screen)
    size their work with it."""
    left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    if state is not None and state.time_budget_s is not None:
        own = max(state.time_budget_s - state.time_spent_s, 0.0)
        left = own if left is None else min(left, own)
    return left


def default_evaluator_factory(spec: str, **kwargs):
    from ..harness import Evaluator

    return Evaluator(spec, **kwargs)


BUDGET_GRACE_S = 5.0  # an evaluation may end this long after the budget (the worker killed then)


def joined_notes(notes: list[tuple[str, str]]) -> str:
    """The problems done for one reason named once with it, "a, b: why; c: why else" (six
    problems stuck on an LLM that sent each kernel back made a stop line of six copies of one
    150-character note)."""
    grouped: dict[str, list[str]] = {}
    for name, note in notes:
        if note:
            grouped.setdefault(note, []).append(name)
    return "; ".join(f"{', '.join(names)}: {note}" for note, names in grouped.items())


@dataclass
class Session:
    """What every experiment of one invocation needs."""

    ws: Workspace
    runs: list[ProblemRun]
    agent: Any
    factory: Callable[..., Any]
    device: str
    timeout_s: float
    seed: int
    printer: Printer
    deadline: float | None
    max_experiments: int | None
    t_start: float

    @property
    def agent_name(self) -> str:
        return getattr(self.agent, "name", "agent")

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(self.deadline - time.monotonic(), 0.0)

    def evaluation_deadline(self) -> float | None:
        """When an evaluation started now must end: the budget's end and a grace (the harness kills
        the worker then; ``Evaluator.deadline``), so no experiment outlasts the budget."""
        return None if self.deadline is None else self.deadline + BUDGET_GRACE_S

    def cut_by_budget(self, evaluation) -> bool:
        """An evaluation that timed out because the budget ended: no verdict, and not recorded
        (a resumed run evaluates the kernel again)."""
        return evaluation is not None and evaluation.verdict == "timeout" and self.out_of_time()

    def run_named(self, name: str) -> ProblemRun:
        return next(r for r in self.runs if r.name == name)

    def capped(self) -> list[ProblemRun]:
        return [r for r in self.runs if self.max_experiments is not None and r.experiments >= self.max_experiments]

    def context(self, run: ProblemRun, experiment: int, problem_dir: Path | None = None) -> Context:
        """What the agent sees for ``experiment`` on ``run`` (``problem_dir``: a slot's own
        copy of the problem directory, for agents that edit files in place)."""
        pdir = problem_dir or self.ws.problem_dir(run.name)
        t = run.target
        return Context(problem=run.problem, problem_spec=t.spec, problem_dir=pdir, kernel_path=pdir / "kernel.py",
                       best_source=self.ws.kernel_path(run.name).read_text(), best=run.best_eval,
                       start=run.start_eval, history=[r.to_row() for r in run.rows], last_failure=run.last_failure,
                       experiment=experiment, device=self.device, seed=self.seed,
                       extra={"log_dir": str(self.ws.log_dir(run.name)), "shapes": t.shapes, "dtype": t.dtype,
                              "weights": t.weights, "workdir": str(self.ws.root),
                              "time_left_s": time_left(run.state, self.deadline)},
                       deadline=self.deadline, notify=self.printer.line)

    def share_time(self) -> None:
        """The baselines told us the roofline headroom: share the time left accordingly."""
        for run, state in zip(self.runs, assign_budgets([r.state for r in self.runs], self.remaining())):
            run.state = state

    def stop_note(self, open_runs: list[ProblemRun]) -> tuple[str, str]:
        """The stop reason and why each problem is done (e.g. "swiglu: at 97% of roofline")."""
        reason = "max-experiments" if self.capped() else "all-done"
        notes = [(r.name, r.note if r.state is not None and r.state.exhausted and r.note else park_note(r.state))
                 for r in open_runs]
        return reason, joined_notes(notes)

    def write(self, run: ProblemRun, record, evaluation, candidate: Path | None, presses_before: int | None,
              description: str, reason: str = "") -> str:
        """Append the row and commit (with the kernel for a keep); nothing when Ctrl-C was
        pressed since ``presses_before`` was read.  Returns the new head commit."""
        with interrupts.holding(presses_before):
            head = self.ws.record(record, candidate)
            run.remember(record, evaluation, description, reason)
        return head


# --------------------------------------------------------------------------- the entry point
def run_optimize(targets: list[Target], workdir: Path, *, agent: AgentConfig | Any, budget_s: float | None,
                 max_experiments: int | None = None, device: str = "auto", seed: int = 0,
                 run_name: str | None = None, timeout_s: float = 60.0, show_progress: bool = True,
                 plan_path: Path | None = None, use_existing_repo: bool = False, parallel: int | None = None,
                 gpus: list[int] | None = None, ray: str | None = None, _evaluator_factory: Callable[..., Any] | None = None,
                 _console=None) -> OptimizeSummary:
    """Optimize ``targets`` in the workspace ``workdir`` until the budget, the experiment cap
    or the orchestrator says stop; resumable.

    ``agent`` is an ``AgentConfig`` (built with ``agents.make_agent``) or an agent object
    (anything with ``name`` and ``propose``).  ``budget_s`` is wall-clock seconds for this
    invocation (None: no limit), checked before each experiment.  ``max_experiments`` caps
    the experiments per problem recorded in the workspace (across invocations).
    ``parallel`` is the number of experiments in flight (default: one per GPU of ``gpus``,
    or of every visible GPU; 1 on CPU); ``gpus`` the CUDA device indices evaluations may use
    (one timing per GPU at a time); ``ray`` a Ray address or ``"local"`` to evaluate on Ray
    actors.  Raises ``OptimizeError``/``WorkspaceError``/``ProblemError``/``AgentConfigError``
    (all ``ValueError``) on bad input before writing anything.  Ctrl-C ends the run with
    ``stopped_reason == "interrupted"`` (unfinished experiments are not recorded).
    ``_evaluator_factory(spec, device=, shapes=, dtypes=, timeout_s=, weights=)`` replaces
    the harness ``Evaluator`` in tests (a picklable one when evaluations run in other
    processes)."""
    from .executor import plan_lanes

    t_start = time.monotonic()
    runs = _validate(targets, budget_s, max_experiments)
    # with Ray the GPUs are the cluster's: the driver may be a machine without one
    device = device if ray is not None and device.startswith("cuda") else resolve_device(device)
    lanes = plan_lanes(device, parallel, gpus, ray)
    if lanes.ray is not None:
        from .ray_executor import require_ray

        require_ray()
    if isinstance(agent, AgentConfig):
        from ..agents.base import make_agent

        agent_obj = make_agent(agent)
    else:
        agent_obj = agent
    plan_text = Path(plan_path).read_text() if plan_path is not None else None
    run_name = sanitize_run_name(run_name) if run_name else default_run_name(
        targets, plan_path, plan_model(plan_text), current_run_name(Path(workdir)))
    for run in runs:  # nothing to start from: refuse before the workspace is created
        missing = no_start_kernel(run.name, run.start_source is not None,
                                  has_committed_kernel(Path(workdir), run_name, run.name),
                                  getattr(agent_obj, "name", ""))
        if missing:
            raise OptimizeError(missing)
    preflight = getattr(agent_obj, "preflight", None)
    if preflight is not None:  # an endpoint that cannot be reached, or refuses the key: exit 2, nothing written
        preflight()

    printer = Printer(show_progress, _console)
    ws = open_workspace(Path(workdir), run_name, use_existing_repo)
    session = Session(ws=ws, runs=runs, agent=agent_obj, factory=_evaluator_factory or default_evaluator_factory,
                      device=device, timeout_s=timeout_s, seed=seed, printer=printer,
                      deadline=t_start + budget_s if budget_s is not None else None,
                      max_experiments=max_experiments, t_start=t_start)
    reason, message, stats = "all-done", "", _Stats(lanes.names if lanes.spread else [device], lanes.parallel)
    with interrupts.watching():
        try:
            try:
                with interrupts.holding():
                    setup_workspace(ws, runs, plan_text, tuned_on_label(device))
                printer.line(f"autokernel optimize: {len(runs)} problem(s) in {ws.root} on branch {ws.branch}, "
                             f"agent {session.agent_name}, device {device}"
                             + (f", up to {lanes.parallel or 'one per Ray worker'} in flight"
                                + (f" on {', '.join(lanes.names)}" if lanes.names else "") if lanes.spread else "")
                             + (f", budget {format_duration(budget_s)}" if budget_s else ""))
                for run in runs:
                    restore_memory(ws, run)
                states = assign_budgets([initial_state(run) for run in runs], budget_s)
                for run, state in zip(runs, states):
                    run.state = state
                if lanes.spread:
                    from .parallel import run_parallel

                    reason, message = run_parallel(session, lanes, stats)
                else:
                    reason, message = _run_serial(session, stats)
            except KeyboardInterrupt:
                reason = "interrupted"
                message = "interrupted; run the same command again to resume"
            except AgentExhausted as exc:  # an agent that can make no more proposals ends the run cleanly
                reason = "agent-refused" if isinstance(exc, AgentRefused) else "agent-exhausted"
                message = str(exc)
        finally:
            for run in runs:
                if run.evaluator is not None:
                    try:
                        run.evaluator.close()
                    except Exception:
                        pass
            try:
                _tidy(ws, runs)
            finally:
                ws.close()
    summary = OptimizeSummary(problems=[summarize_problem(ws, run, device) for run in runs], stopped_reason=reason,
                              workdir=ws.root, branch=ws.branch, run_name=ws.run_name,
                              experiments_run=stats.experiments, rejected_run=stats.rejected, wall_s=time.monotonic() - t_start, message=message,
                              recovered=list(ws.recovered), parallel=stats.parallel or 1, lanes=stats.lanes,
                              lane_busy_s=stats.lane_busy_s(), evaluation_s=stats.evaluation_s,
                              unreachable_s=agent_unreachable_s(agent_obj), outages=getattr(agent_obj, "outages", 0))
    try:
        log_throughput(ws.root, summary)
    except OSError:
        pass
    if reason != "interrupted":
        printer.line(f"stopped: {reason}" + (f" ({message})" if message else "")
                     + f" after {stats.experiments} experiment(s) in {format_duration(summary.wall_s)}"
                     + (f"; {unreachable_text(summary)}" if summary.outages else ""))
        if lanes.spread and throughput_text(summary):
            printer.line(throughput_text(summary))
    return summary


class _Stats:
    """Experiments recorded this run, and how long evaluations ran per lane."""

    def __init__(self, lanes: list[str], parallel: int | None = 1):
        self.parallel = parallel
        self.experiments = 0
        self.rejected = 0  # experiments whose proposal never reached the judge
        self.use_lanes(lanes)

    def use_lanes(self, lanes: list[str]) -> None:
        self.lanes = list(lanes)
        self.evaluation_s = []
        self._busy = [0.0] * len(self.lanes)

    def evaluated(self, lane: int, seconds: float) -> None:
        self.evaluation_s.append(seconds)
        if 0 <= lane < len(self._busy):
            self._busy[lane] += seconds

    def lane_busy_s(self) -> list[float]:
        return [round(b, 3) for b in self._busy]


def _validate(targets: list[Target], budget_s: float | None, max_experiments: int | None) -> list[ProblemRun]:
    from ..problems import get_problem, parse_dtype
    from ..problems.base import has_dims

    if not targets:
        raise OptimizeError("nothing to optimize: no supported problem")
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise OptimizeError(f"problem names must be unique: {', '.join(names)}")
    if budget_s is not None and budget_s <= 0:
        raise OptimizeError("the budget must be positive")
    if max_experiments is not None and max_experiments < 0:
        raise OptimizeError("--max-experiments must be >= 0")
    runs: list[ProblemRun] = []
    for t in targets:
        if sanitize_run_name(t.name) != t.name or t.name in (".", ".."):
            raise OptimizeError(f"bad problem name {t.name!r}: use letters, digits, '.', '_', '-'")
        problem = get_problem(t.spec)
        if problem.source != "builtin" and Path(t.spec).is_file():
            t = replace(t, spec=str(Path(t.spec).resolve()))  # the worker may run elsewhere; resume from anywhere
        if t.dtype is not None:
            parse_dtype(t.dtype)
        if t.shapes is not None:
            for shape in t.shapes:
                if not has_dims(shape, problem.dims, problem.optional_dims):
                    raise OptimizeError(f"shape {shape} of {t.name} does not have the dimensions {', '.join(problem.dims)}")
        if t.weights is not None and (t.shapes is None or len(t.weights) != len(t.shapes)):
            raise OptimizeError(f"{t.name}: one weight per shape is needed")
        if t.start_file is not None:
            if not Path(t.start_file).is_file():
                raise OptimizeError(f"kernel file not found: {t.start_file}")
            start_source = Path(t.start_file).read_text()
            problem_text = start_kernel_problem(problem, start_source, t.start_file)
            if problem_text:
                raise OptimizeError(problem_text)
        elif problem.starter is not None and Path(problem.starter).is_file():
            start_source = Path(problem.starter).read_text()
        else:
            start_source = None  # fine on resume; checked when the problem is set up
        runs.append(ProblemRun(target=t, problem=problem, start_source=start_source))
    return runs


# --------------------------------------------------------------------------- one experiment at a time
def first_evaluation_order(s: Session) -> list[ProblemRun]:
    """The problems without a baseline yet, in the order their first evaluations run
    (``loop/first_evals.py``: cheapest first on CPU)."""
    pending = [r for r in s.runs if r.baseline is None]
    costs = [first_evals.estimated_cost(r.problem, r.target.shapes, [r.target.dtype] if r.target.dtype else None)
             for r in pending]
    return first_evals.order(pending, costs, s.device)


def _run_serial(s: Session, stats: _Stats) -> tuple[str, str]:
    pending = first_evaluation_order(s)
    for i, run in enumerate(pending):
        if s.out_of_time():
            return "budget", ""
        _baseline(s, run, stats, first_evals.timeout(s.timeout_s, s.remaining(), len(pending) - i))
        run.evaluator.timeout_s = s.timeout_s  # the experiments get the usual timeout
        run.state = initial_state(run, run.state)
    s.share_time()
    while True:
        if s.out_of_time():
            return "budget", ""
        capped = s.capped()
        open_runs = [r for r in s.runs if r not in capped]
        name, new_states = choose([r.state for r in open_runs], s.remaining())
        for r, state in zip(open_runs, new_states):
            r.state = state
        if name is None:
            return s.stop_note(open_runs)
        if _experiment(s, s.run_named(name), stats):
            stats.experiments += 1


def _evaluator(s: Session, run: ProblemRun, timeout_s: float | None = None):
    """The problem's evaluator, its deadline the budget's end (``Session.evaluation_deadline``)."""
    if run.evaluator is None:
        run.evaluator = s.factory(run.target.spec, **run.evaluator_kwargs(s.device, timeout_s or s.timeout_s))
    run.evaluator.deadline = s.evaluation_deadline()
    return run.evaluator


def baseline_description(evaluation, timeout_s: float, device: str) -> str:
    if evaluation.verdict == "timeout":
        return (f"starting kernel {TIMEOUT_DESCRIPTION} {timeout_s:.0f} s per request"
                + ("; the interpreter is too slow for these shapes" if not device.startswith("cuda") else "")
                + ": not a verdict on the kernel)")
    return "starting kernel" + ("" if evaluation.correct else f" (not correct: {evaluation.verdict})")


def _baseline(s: Session, run: ProblemRun, stats: _Stats, timeout_s: float) -> None:
    t0 = time.monotonic()
    presses = interrupts.pressed()
    commit = s.ws.head()
    snapshot = s.ws.candidate_path(run.name, 0)
    shutil.copyfile(s.ws.kernel_path(run.name), snapshot)
    evaluation = _evaluator(s, run, timeout_s).evaluate(snapshot)
    stats.evaluated(0, time.monotonic() - t0)
    if s.cut_by_budget(evaluation):
        s.printer.line(f"{run.name}: the budget ended during the starting kernel's evaluation; not recorded")
        return
    s.ws.save_evaluation(run.name, 0, evaluation)
    description = baseline_description(evaluation, timeout_s, s.device)
    record = run.record(0, s.agent_name, "baseline", evaluation, time.monotonic() - t0, 0, commit, description)
    s.write(run, record, evaluation, None, presses, "starting kernel")
    s.printer.line(progress_line(run, record, s.deadline))


def _experiment(s: Session, run: ProblemRun, stats: _Stats) -> bool:
    """One experiment on ``run``.  False when the agent had nothing to propose (no row)."""
    t0 = time.monotonic()
    presses = interrupts.pressed()
    experiment = run.next_experiment
    commit = s.ws.head()
    gone = agent_unreachable_s(s.agent)
    try:
        proposal = s.agent.propose(s.context(run, experiment))
        t0 += agent_unreachable_s(s.agent) - gone  # an outage is not the problem's time (row's wall_s, its budget)
    except (KeyboardInterrupt, AgentExhausted):
        s.ws.restore_problem_dir(run.name)
        raise
    except NoProposal:  # e.g. the budget ended while the model endpoint was unreachable: no row
        s.ws.restore_problem_dir(run.name)
        return False
    except Exception as exc:
        proposal = Proposal(source=None, description="agent error", rejected_reason=f"{type(exc).__name__}: {exc}")
    s.ws.restore_problem_dir(run.name)

    if proposal.source is None and (proposal.rejected_reason or "").startswith(EXHAUSTED_PREFIX):
        run.state = after_experiment(run.state, improved=False, seconds=time.monotonic() - t0, exhausted=True)
        run.note = proposal.rejected_reason or EXHAUSTED_PREFIX
        s.printer.line(f"{run.name}: {run.note}; done with this problem")
        return False

    evaluation = None
    candidate: Path | None = None
    reason = ""
    if proposal.source is None:
        status = "rejected"
        stats.rejected += 1
        reason = proposal.rejected_reason or "the agent produced no kernel"
        description = f"{proposal.description} (rejected: {reason})"
    else:
        candidate = s.ws.candidate_path(run.name, experiment)
        write_text_atomic(candidate, proposal.source)
        incumbent = s.ws.kernel_path(run.name) if run.best_correct else None
        t_eval = time.monotonic()
        evaluation = _evaluator(s, run).evaluate(candidate, incumbent_file=incumbent)
        stats.evaluated(0, time.monotonic() - t_eval)
        if s.cut_by_budget(evaluation):
            s.ws.restore_problem_dir(run.name)
            s.printer.line(f"{run.name} exp {experiment:>3}: the budget ended during its evaluation; not recorded")
            return False
        s.ws.save_evaluation(run.name, experiment, evaluation)
        status = decide(evaluation, incumbent_correct=run.best_correct,
                        incumbent_us=run.best_row.latency_us if run.best_correct else None)
        description = proposal.description
    record = run.record(experiment, s.agent_name, status, evaluation, time.monotonic() - t0, proposal.tokens,
                        commit, description)
    s.write(run, record, evaluation, candidate, presses, proposal.description, reason)
    run.state = after_experiment(run.state, improved=status == "keep", seconds=record.wall_s,
                                 pct_roofline=record.pct_roofline, best_speedup=record.speedup_vs_start)
    s.printer.line(progress_line(run, record, s.deadline, evaluation.vs_incumbent if evaluation is not None else None))
    stuck = run.done_if_stuck()
    if stuck is not None:
        s.printer.line(f"{run.name}: {stuck}; done with this problem")
    return True


def _tidy(ws: Workspace, runs: list[ProblemRun]) -> None:
    """Leave the tree clean: every kernel.py as committed."""
    for run in runs:
        if ws.kernel_path(run.name).parent.exists():
            try:
                ws.restore_problem_dir(run.name)
            except Exception:
                pass


__all__ = ["Target", "ProblemSummary", "OptimizeSummary", "OptimizeError", "WorkspaceError", "run_optimize",
           "targets_from_plan", "default_run_name", "model_run_name", "resolve_device", "decide", "speedup_vs_start", "progress_line",
           "STOP_REASONS", "EXHAUSTED_PREFIX"]
