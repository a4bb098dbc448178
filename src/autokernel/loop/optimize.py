"""The optimization loop: propose → evaluate → keep (commit) or revert → one results row.

``run_optimize`` is the library entry point behind ``autokernel optimize`` (and the optimize
step of ``autokernel run``).  One experiment is one agent proposal, one evaluation of the
candidate against the incumbent (timed in the same worker, interleaved) and one row in
``results.tsv``.  A candidate is kept only when it is correct and faster than the incumbent
beyond the measured noise (``Evaluation.vs_incumbent.significant``); an incorrect kernel is
never kept.  The orchestrator (``autokernel.orchestrator``) picks the problem each experiment
goes to.  Everything is in the workspace (``loop/workspace.py``), so a run that stops for
any reason — budget, Ctrl-C, ``kill -9`` — resumes when the same command runs again.
"""
from __future__ import annotations

import shutil
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ..agents.base import AgentConfig, AgentExhausted, AgentRefused, Context, Proposal
from ..files import replace_file_atomic, write_text_atomic
from ..harness.records import Comparison
from ..provenance import tuned_on_label
from ..orchestrator import ProblemState, after_experiment, assign_budgets, choose
from . import figures, first_evals
from .budget import format_duration
from .results import ExperimentRecord, append_result, ensure_results, read_results
from .inputs import no_start_kernel, start_kernel_problem
from .workspace import (ProblemFile, Workspace, WorkspaceError, current_run_name, has_committed_kernel, keep_message,
                        open_workspace, record_message, sanitize_run_name)

STOP_REASONS = ("budget", "max-experiments", "interrupted", "all-done", "agent-exhausted", "agent-refused")
EXHAUSTED_PREFIX = "search space exhausted"
COMPUTE_BOUND_INTENSITY = 32.0  # flop/byte above which throughput is reported in TFLOP/s


class OptimizeError(ValueError):
    """Bad input to the loop (user mistake, exit code 2).  Raised before anything is written."""


@dataclass
class Target:
    """One problem to optimize.

    ``name`` is the directory under ``<workdir>/problems/``; ``spec`` a kind name or a
    problem-file path (``autokernel.problems.get_problem``); ``shapes`` None means the
    problem's default shapes for the device; ``weights`` are calls per shape (the score
    weights); ``start_file`` None means the shipped starter; ``fraction`` is the problem's
    share of the model time (from a plan; used by the orchestrator)."""

    name: str
    spec: str
    shapes: list[dict[str, int]] | None = None
    weights: list[float] | None = None
    dtype: str | None = None
    start_file: Path | None = None
    fraction: float | None = None


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
    experiments_run: int = 0  # experiments in this invocation
    wall_s: float = 0.0
    message: str = ""  # extra words on why it stopped (e.g. the agent's reason)
    recovered: list[str] = field(default_factory=list)  # what recovery did at startup


# --------------------------------------------------------------------------- inputs
def targets_from_plan(plan) -> list[Target]:
    """One Target per supported problem of an ``autokernel.plan.Plan``."""
    targets = []
    for p in plan.supported:
        if not p.kind:
            continue
        weights = [float(c) for c in p.calls] if p.calls and len(p.calls) == len(p.shapes) else None
        targets.append(Target(name=p.name, spec=p.kind, shapes=[dict(s) for s in p.shapes] or None,
                              weights=weights, dtype=p.dtype or None, fraction=p.fraction))
    return targets


def default_run_name(targets: list[Target], plan_path: Path | None = None, model: str | None = None,
                     current: str | None = None) -> str:
    """The branch's run name: the model's name for a plan (``current``, the run name the
    workdir is on, when it is an older ``plan-<file>`` name, so that such runs resume), else
    the problems' names."""
    if plan_path is not None:
        legacy = sanitize_run_name(f"plan-{Path(plan_path).stem}")
        if current == legacy or not model:
            return legacy
        return sanitize_run_name(model_run_name(model))
    name = "+".join(t.name for t in targets)
    return sanitize_run_name(name if len(name) <= 60 else f"{targets[0].name}+{len(targets) - 1}-more")


def model_run_name(model: str) -> str:
    """``llama`` → ``llama``; ``path/to/net.py:Net`` → ``net-Net``; ``hf:gpt2`` → ``hf-gpt2``."""
    if ".py" in model:
        path, _, cls = model.partition(":")
        return f"{Path(path).stem}-{cls}" if cls else Path(path).stem
    return model.replace(":", "-")


def resolve_device(device: str) -> str:
    from ..hardware import resolve_device as resolve

    try:
        return resolve(device)
    except ValueError as exc:
        raise OptimizeError(str(exc)) from None


def _plan_model(plan_text: str | None) -> str | None:
    import json

    try:
        return str(json.loads(plan_text).get("model") or "") or None if plan_text else None
    except (ValueError, AttributeError):
        return None


# --------------------------------------------------------------------------- per-problem state
@dataclass
class _Run:
    target: Target
    problem: Any
    start_source: str | None
    rows: list[ExperimentRecord] = field(default_factory=list)
    best_eval: Any = None
    start_eval: Any = None
    last_failure: dict[str, str] | None = None
    evaluator: Any = None
    state: ProblemState | None = None
    note: str = ""

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
    def next_experiment(self) -> int:
        return max((r.experiment for r in self.rows), default=-1) + 1


def _interrupt_safe() -> bool:
    return threading.current_thread() is threading.main_thread()


_SIGINTS = [0]  # Ctrl-C presses seen while run_optimize is running


def _on_sigint(signum, frame):
    _SIGINTS[0] += 1
    raise KeyboardInterrupt


@contextmanager
def _watch_interrupts():
    """Count Ctrl-C presses (and raise KeyboardInterrupt as usual) while the loop runs, so an
    experiment whose evaluation worker died from the same Ctrl-C is not recorded as a crash."""
    if not _interrupt_safe():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _defer_interrupt():
    """Hold Ctrl-C until the block (writing a row and committing it) is done."""
    if not _interrupt_safe():
        yield
        return
    pending: list[bool] = []

    def hold(signum, frame):
        _SIGINTS[0] += 1
        pending.append(True)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            raise KeyboardInterrupt


def _default_evaluator_factory(spec: str, **kwargs):
    from ..harness import Evaluator

    return Evaluator(spec, **kwargs)


class _Printer:
    def __init__(self, enabled: bool, console=None):
        self.enabled = enabled
        if enabled and console is None:
            from rich.console import Console

            console = Console(highlight=False, soft_wrap=True)
        self.console = console

    def line(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, markup=False)


# --------------------------------------------------------------------------- the loop
def run_optimize(targets: list[Target], workdir: Path, *, agent: AgentConfig | Any, budget_s: float | None,
                 max_experiments: int | None = None, device: str = "auto", seed: int = 0,
                 run_name: str | None = None, timeout_s: float = 60.0, show_progress: bool = True,
                 plan_path: Path | None = None, use_existing_repo: bool = False,
                 _evaluator_factory: Callable[..., Any] | None = None,
                 _console=None) -> OptimizeSummary:
    """Optimize ``targets`` in the workspace ``workdir`` until the budget, the experiment cap
    or the orchestrator says stop; resumable.

    ``agent`` is an ``AgentConfig`` (built with ``agents.make_agent``) or an agent object
    (anything with ``name`` and ``propose``).  ``budget_s`` is wall-clock seconds for this
    invocation (None: no limit), checked before each experiment.  ``max_experiments`` caps
    the experiments per problem recorded in the workspace (across invocations).  Raises
    ``OptimizeError``/``WorkspaceError``/``ProblemError``/``AgentConfigError`` (all
    ``ValueError``) on bad input before writing anything.  Ctrl-C ends the run with
    ``stopped_reason == "interrupted"`` (the unfinished experiment is not recorded).
    ``_evaluator_factory(spec, device=, shapes=, dtypes=, timeout_s=, weights=)`` replaces
    the harness ``Evaluator`` in tests."""
    from ..problems import get_problem, parse_dtype

    t_start = time.monotonic()
    if not targets:
        raise OptimizeError("nothing to optimize: no supported problem")
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise OptimizeError(f"problem names must be unique: {', '.join(names)}")
    if budget_s is not None and budget_s <= 0:
        raise OptimizeError("the budget must be positive")
    if max_experiments is not None and max_experiments < 0:
        raise OptimizeError("--max-experiments must be >= 0")
    device = resolve_device(device)
    runs: list[_Run] = []
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
                if list(shape) != list(problem.dims):
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
        runs.append(_Run(target=t, problem=problem, start_source=start_source))
    if isinstance(agent, AgentConfig):
        from ..agents.base import make_agent

        agent_obj = make_agent(agent)
    else:
        agent_obj = agent
    plan_text = Path(plan_path).read_text() if plan_path is not None else None
    run_name = sanitize_run_name(run_name) if run_name else default_run_name(
        targets, plan_path, _plan_model(plan_text), current_run_name(Path(workdir)))

    printer = _Printer(show_progress, _console)
    factory = _evaluator_factory or _default_evaluator_factory
    deadline = t_start + budget_s if budget_s is not None else None
    reason, message, run_count = "all-done", "", 0
    watch = _watch_interrupts()
    for run in runs:  # nothing to start from: refuse before the workspace is created
        missing = no_start_kernel(run.name, run.start_source is not None,
                                  has_committed_kernel(Path(workdir), run_name, run.name),
                                  getattr(agent_obj, "name", ""))
        if missing:
            raise OptimizeError(missing)
    ws = open_workspace(Path(workdir), run_name, use_existing_repo)
    recovered = list(ws.recovered)
    watch.__enter__()
    try:
        try:
            with _defer_interrupt():
                _setup(ws, runs, plan_text, tuned_on_label(device))
            printer.line(f"autokernel optimize: {len(runs)} problem(s) in {ws.root} on branch {ws.branch}, "
                         f"agent {getattr(agent_obj, 'name', '?')}, device {device}"
                         + (f", budget {format_duration(budget_s)}" if budget_s else ""))
            states = []
            for run in runs:
                run.rows = read_results(ws.results_path, run.name)
                _restore_memory(ws, run)
                states.append(_initial_state(run))
            states = assign_budgets(states, budget_s)
            for run, state in zip(runs, states):
                run.state = state
            pending = [r for r in runs if r.baseline is None]
            pending = first_evals.order(pending, [first_evals.estimated_cost(r.problem, r.target.shapes, [
                r.target.dtype] if r.target.dtype else None) for r in pending], device)
            for i, run in enumerate(pending):
                if deadline is not None and time.monotonic() >= deadline:
                    reason = "budget"
                    break
                left = None if deadline is None else deadline - time.monotonic()
                _baseline(ws, run, factory, device, first_evals.timeout(timeout_s, left, len(pending) - i),
                          agent_obj, printer, deadline)
                run.evaluator.timeout_s = timeout_s  # the experiments get the usual timeout
                run.state = _initial_state(run, run.state)
            else:
                # the baselines told us the roofline headroom: share the time left accordingly
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                for run, state in zip(runs, assign_budgets([r.state for r in runs], left)):
                    run.state = state
                while True:
                    if deadline is not None and time.monotonic() >= deadline:
                        reason = "budget"
                        break
                    capped = [r for r in runs if max_experiments is not None and r.experiments >= max_experiments]
                    open_runs = [r for r in runs if r not in capped]
                    remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                    name, new_states = choose([r.state for r in open_runs], remaining)
                    for r, s in zip(open_runs, new_states):
                        r.state = s
                    if name is None:
                        reason = "max-experiments" if capped else "all-done"
                        # why each problem is done (e.g. "swiglu: at 97% of roofline"), for the stop line
                        message = "; ".join(f"{r.name}: {_park_note(r.state)}" for r in open_runs
                                            if r.state and _park_note(r.state))
                        break
                    run = next(r for r in runs if r.name == name)
                    if _experiment(ws, run, agent_obj, factory, device, timeout_s, seed, printer, deadline):
                        run_count += 1
        except KeyboardInterrupt:
            reason = "interrupted"
            message = "interrupted; run the same command again to resume"
        except AgentExhausted as exc:  # an agent that can make no more proposals ends the run cleanly
            reason = "agent-refused" if isinstance(exc, AgentRefused) else "agent-exhausted"
            message = str(exc)
    finally:
        watch.__exit__(None, None, None)
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
    summary = OptimizeSummary(problems=[_summarize(ws, run, device) for run in runs], stopped_reason=reason,
                              workdir=ws.root, branch=ws.branch, run_name=ws.run_name, experiments_run=run_count,
                              wall_s=time.monotonic() - t_start, message=message, recovered=recovered)
    if reason != "interrupted":
        printer.line(f"stopped: {reason}" + (f" ({message})" if message else "")
                     + f" after {run_count} experiment(s) in {format_duration(summary.wall_s)}")
    return summary


# --------------------------------------------------------------------------- steps
def _setup(ws: Workspace, runs: list[_Run], plan_text: str | None, tuned_on: str = "") -> None:
    recorded = {r.problem for r in read_results(ws.results_path)}
    for run in runs:  # results are only comparable on the same problem definition
        committed = ws.committed_text(ws.problem_file(run.name))
        if committed is None or run.name not in recorded:
            continue
        old, t = ProblemFile.from_json(committed), run.target
        if (old.spec, old.shapes, old.weights, old.dtype) != (t.spec, t.shapes, t.weights, t.dtype):
            raise OptimizeError(f"problem {t.name} of run {ws.run_name} was set up with another spec, shapes, "
                                f"weights or dtype; use another --run-name (or workdir) for this one")
    ensure_results(ws.results_path)
    if ws.committed_text(ws.results_path) is None:
        ws.commit([ws.results_path], "results.tsv")
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


def _restore_memory(ws: Workspace, run: _Run) -> None:
    """On resume: the evaluations of the current best and the start, and the last failure."""
    best, base = run.best_row, run.baseline
    if best is not None:
        run.best_eval = _load_eval(ws, run.name, best.experiment)
    if base is not None:
        run.start_eval = _load_eval(ws, run.name, base.experiment)
    last = run.rows[-1] if run.rows else None
    if last is not None and last.status in ("incorrect", "timeout", "crash", "rejected"):
        ev = _load_eval(ws, run.name, last.experiment)
        run.last_failure = {"status": last.status, "stage": last.failed_stage,
                            "message": ev.message if ev is not None else "", "description": last.description}


def _load_eval(ws: Workspace, name: str, experiment: int):
    from ..harness.records import Evaluation

    path = ws.log_dir(name) / f"exp_{experiment:04d}.json"
    try:
        return Evaluation.from_json(path.read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _initial_state(run: _Run, previous: ProblemState | None = None) -> ProblemState:
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


def _evaluator(run: _Run, factory, device: str, timeout_s: float):
    if run.evaluator is None:
        t = run.target
        run.evaluator = factory(t.spec, device=device, shapes=t.shapes, dtypes=[t.dtype] if t.dtype else None,
                                timeout_s=timeout_s, weights=t.weights)
    return run.evaluator


def _throughput(problem, evaluation) -> tuple[float | None, str]:
    timings = [t for t in evaluation.timings if t.latency_us]
    if not timings:
        return None, ""
    try:
        from ..problems.base import parse_dtype

        t0 = timings[0]
        intensity = problem.flops(t0.shape) / max(problem.bytes(t0.shape, parse_dtype(t0.dtype)), 1.0)
    except Exception:
        intensity = 0.0
    attr, unit = ("tflops", "TFLOP/s") if intensity >= COMPUTE_BOUND_INTENSITY else ("gbps", "GB/s")
    pairs = [(t.weight * t.latency_us, getattr(t, attr)) for t in timings if getattr(t, attr) is not None]
    if not pairs or len(pairs) != len(timings):
        return None, ""
    total = sum(w for w, _ in pairs)
    return (sum(w * v for w, v in pairs) / total if total > 0 else None), unit


def _record(run: _Run, experiment: int, agent_name: str, status: str, evaluation, wall_s: float,
            tokens: int, commit: str, description: str) -> ExperimentRecord:
    throughput, unit = (None, "")
    latency = pct = vs_eager = vs_start = None
    failed_stage = ""
    if evaluation is not None:
        failed_stage = evaluation.failed_stage or ""
        if evaluation.correct and evaluation.score_us:
            latency = float(evaluation.score_us)
            throughput, unit = _throughput(run.problem, evaluation)
            pct = evaluation.pct_roofline
            vs_eager = figures.vs_eager(evaluation.eager_score_us, latency, evaluation.timing_kind)
            vs_start = speedup_vs_start(run.baseline, run.best_row, evaluation, status)
    return ExperimentRecord(experiment=experiment, problem=run.name, agent=agent_name, status=status,
                            failed_stage=failed_stage, latency_us=latency, throughput=throughput,
                            throughput_unit=unit, pct_roofline=pct, speedup_vs_eager=vs_eager,
                            speedup_vs_start=vs_start, wall_s=round(wall_s, 3), tokens=tokens, commit=commit,
                            description=description[:300])


def speedup_vs_start(baseline: ExperimentRecord | None, best: ExperimentRecord | None, evaluation,
                     status: str) -> float | None:
    """This kernel against the starting kernel: the start's recorded score over this one's
    (``loop.figures``: one definition everywhere).  ``best`` is unused, kept for callers."""
    if status == "baseline":
        return 1.0 if evaluation.correct and evaluation.score_us else None
    if baseline is None or not baseline.correct:
        return None
    return figures.vs_start(baseline.latency_us, evaluation.score_us)


def _save_eval(ws: Workspace, name: str, experiment: int, evaluation) -> None:
    if evaluation is None:
        return
    try:
        text = evaluation.to_json()
    except Exception:
        return
    write_text_atomic(ws.log_dir(name) / f"exp_{experiment:04d}.json", text)


def _commit_row(ws: Workspace, run: _Run, record: ExperimentRecord, candidate: Path | None,
                interrupts_before: int | None = None) -> None:
    """Append the row and commit: with the kernel for a keep, results.tsv alone otherwise.
    When Ctrl-C was pressed since ``interrupts_before`` was read, record nothing."""
    with _defer_interrupt():
        if interrupts_before is not None and _SIGINTS[0] != interrupts_before:
            raise KeyboardInterrupt
        kernel = ws.kernel_path(run.name)
        if record.status == "keep" and candidate is not None:
            replace_file_atomic(candidate, kernel)
            append_result(ws.results_path, record)
            ws.commit([ws.results_path, kernel], keep_message(record))
        else:
            append_result(ws.results_path, record)
            ws.commit([ws.results_path], record_message(record))
        run.rows.append(record)


def _baseline(ws: Workspace, run: _Run, factory, device, timeout_s, agent_obj, printer, deadline) -> None:
    t0 = time.monotonic()
    interrupts = _SIGINTS[0]
    commit = ws.head()
    snapshot = ws.candidate_path(run.name, 0)
    shutil.copyfile(ws.kernel_path(run.name), snapshot)
    evaluation = _evaluator(run, factory, device, timeout_s).evaluate(snapshot)
    _save_eval(ws, run.name, 0, evaluation)
    description = "starting kernel" + ("" if evaluation.correct else f" (not correct: {evaluation.verdict})")
    if evaluation.verdict == "timeout":
        description = (f"starting kernel (timeout after {timeout_s:g} s per request"
                       + ("; the interpreter is too slow for these shapes" if not device.startswith("cuda") else "")
                       + ": not a verdict on the kernel)")
    record = _record(run, 0, getattr(agent_obj, "name", "agent"), "baseline", evaluation, time.monotonic() - t0,
                     0, commit, description)
    _commit_row(ws, run, record, None, interrupts)
    run.start_eval = evaluation
    run.best_eval = evaluation
    if not evaluation.correct:
        run.last_failure = {"status": evaluation.verdict, "stage": evaluation.failed_stage or "",
                            "message": evaluation.message, "description": "starting kernel"}
    _progress(printer, run, record, deadline)


def _restore_problem_dir(ws: Workspace, name: str) -> None:
    """Undo whatever an agent changed under problems/<name> (command agents edit in place)."""
    rel = ws.rel(ws.problem_dir(name))
    if ws.git("status", "--porcelain", "--", rel).strip():
        ws.git("checkout", "-q", "HEAD", "--", rel, check=False)
        ws.git("clean", "-fdq", "--", rel)


def _experiment(ws: Workspace, run: _Run, agent_obj, factory, device, timeout_s, seed, printer, deadline) -> bool:
    """One experiment on ``run``.  False when the agent had nothing to propose (no row)."""
    t0 = time.monotonic()
    interrupts = _SIGINTS[0]
    experiment = run.next_experiment
    kernel = ws.kernel_path(run.name)
    commit = ws.head()
    t = run.target
    context = Context(problem=run.problem, problem_spec=t.spec, problem_dir=ws.problem_dir(run.name),
                      kernel_path=kernel, best_source=kernel.read_text(), best=run.best_eval, start=run.start_eval,
                      history=[r.to_row() for r in run.rows], last_failure=run.last_failure, experiment=experiment,
                      device=device, seed=seed,
                      extra={"log_dir": str(ws.log_dir(run.name)), "shapes": t.shapes, "dtype": t.dtype,
                             "weights": t.weights, "workdir": str(ws.root),
                             "time_left_s": time_left(run.state, deadline)})
    try:
        proposal = agent_obj.propose(context)
    except (KeyboardInterrupt, AgentExhausted):
        _restore_problem_dir(ws, run.name)
        raise
    except Exception as exc:
        proposal = Proposal(source=None, description="agent error", rejected_reason=f"{type(exc).__name__}: {exc}")
    _restore_problem_dir(ws, run.name)
    agent_name = getattr(agent_obj, "name", "agent")

    if proposal.source is None and (proposal.rejected_reason or "").startswith(EXHAUSTED_PREFIX):
        run.state = after_experiment(run.state, improved=False, seconds=time.monotonic() - t0, exhausted=True)
        run.note = proposal.rejected_reason or EXHAUSTED_PREFIX
        printer.line(f"{run.name}: {run.note}; done with this problem")
        return False

    evaluation = None
    candidate: Path | None = None
    if proposal.source is None:
        status = "rejected"
        reason = proposal.rejected_reason or "the agent produced no kernel"
        description = f"{proposal.description} (rejected: {reason})"
        run.last_failure = {"status": "rejected", "stage": "", "message": reason, "description": proposal.description}
    else:
        candidate = ws.candidate_path(run.name, experiment)
        write_text_atomic(candidate, proposal.source)
        incumbent = kernel if run.best_correct else None
        evaluation = _evaluator(run, factory, device, timeout_s).evaluate(candidate, incumbent_file=incumbent)
        _save_eval(ws, run.name, experiment, evaluation)
        status = decide(evaluation, incumbent_correct=run.best_correct,
                        incumbent_us=run.best_row.latency_us if run.best_correct else None)
        description = proposal.description
        if status in ("keep", "revert"):
            run.last_failure = None
        else:
            run.last_failure = {"status": status, "stage": evaluation.failed_stage or "",
                                "message": evaluation.message, "description": proposal.description}
    record = _record(run, experiment, agent_name, status, evaluation, time.monotonic() - t0, proposal.tokens,
                     commit, description)
    _commit_row(ws, run, record, candidate, interrupts)
    if status == "keep":
        run.best_eval = evaluation
    run.state = after_experiment(run.state, improved=status == "keep", seconds=record.wall_s,
                                 pct_roofline=record.pct_roofline, best_speedup=record.speedup_vs_start)
    _progress(printer, run, record, deadline, evaluation.vs_incumbent if evaluation is not None else None)
    return True


def time_left(state: ProblemState | None, deadline: float | None) -> float | None:
    """Seconds this problem may still use: the run's deadline and the problem's own time
    budget, whichever ends first (None: no limit).  Agents that search (the tuner's screen)
    size their work with it."""
    left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    if state is not None and state.time_budget_s is not None:
        own = max(state.time_budget_s - state.time_spent_s, 0.0)
        left = own if left is None else min(left, own)
    return left


def decide(evaluation, *, incumbent_correct: bool, incumbent_us: float | None = None) -> str:
    """The experiment's status from its evaluation.  Incorrect, crashed, timed-out and rejected
    kernels are never kept; a correct one is kept when the incumbent is not correct, or when
    it beat the incumbent beyond the measured noise in the paired timing *and* its own score is
    below the incumbent's recorded score ``incumbent_us`` (so the best is never slower than
    the start by the figures everyone reads: ``loop.figures``)."""
    if not evaluation.correct or evaluation.verdict != "pass":
        return evaluation.verdict if evaluation.verdict in ("incorrect", "timeout", "crash", "rejected") else "incorrect"
    if not incumbent_correct:
        return "keep"
    comparison = evaluation.vs_incumbent
    if comparison is not None and comparison.significant and comparison.candidate_us < comparison.incumbent_us:
        if incumbent_us is not None and evaluation.score_us is not None and evaluation.score_us >= incumbent_us:
            return "revert"  # the machine drifted: faster in the pair, not on the recorded scores
        return "keep"
    return "revert"


def _progress(printer: _Printer, run: _Run, record: ExperimentRecord, deadline: float | None,
              comparison: Comparison | None = None) -> None:
    if printer.enabled:
        printer.line(progress_line(run, record, deadline, comparison))


def progress_line(run: _Run, record: ExperimentRecord, deadline: float | None,
                  comparison: Comparison | None = None) -> str:
    """One line per experiment.  A candidate's own score and the best's were measured at
    different times; the keep/revert decision rests on the paired comparison, so that is shown
    too ("vs best 1.03x ±8%")."""
    best = run.best_row
    best_text = f"{best.latency_us:.4g} us" if best is not None and best.latency_us else "none correct"
    if best is not None and best.speedup_vs_start and best.status == "keep":
        best_text += f" ({best.speedup_vs_start:.3g}x)"
    latency = f"{record.latency_us:.4g} us" if record.latency_us else (record.failed_stage or "-")
    kept = sum(1 for r in run.rows if r.status == "keep")
    left = f"  left {format_duration(deadline - time.monotonic())}" if deadline is not None else ""
    paired = ""
    if comparison is not None and comparison.candidate_us > 0:
        paired = f" (vs best {comparison.decision_speedup:.3g}x ±{100 * comparison.noise_frac:.0f}%)"
        if record.status == "revert" and comparison.significant:
            paired += " but its score is not below the best's"
    return (f"{run.name} exp {record.experiment:>3} {record.status:<9} {latency + paired:<12} best {best_text}  "
            f"kept {kept}{left}  {record.description}")


def _tidy(ws: Workspace, runs: list[_Run]) -> None:
    """Leave the tree clean: every kernel.py as committed."""
    for run in runs:
        if ws.kernel_path(run.name).parent.exists():
            try:
                _restore_problem_dir(ws, run.name)
            except Exception:
                pass


def _summarize(ws: Workspace, run: _Run, device: str) -> ProblemSummary:
    rows = read_results(ws.results_path, run.name)
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
        note=run.note or (run.state and _park_note(run.state)) or "")


def _park_note(state: ProblemState) -> str:
    from ..orchestrator import park_reason

    return park_reason(state) or ""


__all__ = ["Target", "ProblemSummary", "OptimizeSummary", "OptimizeError", "WorkspaceError", "run_optimize",
           "targets_from_plan", "default_run_name", "resolve_device", "decide", "STOP_REASONS"]
