"""Several experiments in flight; rows, numbers and commits one at a time.

The driver (this thread) owns the workspace, the orchestrator states and every write.  Each
experiment in flight has a *slot*: a thread that asks the agent for a proposal (concurrently
for agents that allow it, one at a time for the others, such as the tuner whose memory is a
file) and then has the executor judge it on a free lane (one GPU each: never two timings on
one GPU).  Finished experiments come back to the driver, which records them per problem in
the order they were started:

* A candidate is kept only if it beats the incumbent current when it is recorded.  One that
  beat an incumbent that has since been replaced (another candidate of the same problem was
  kept first) is judged again against the new incumbent before it is recorded; one that lost
  to the older incumbent is recorded as a revert, saying which incumbent it lost to.
* Numbers are given when a row is written (serial, without gaps); the agent was told the
  number its experiment would get, which is the same unless an earlier proposal came back
  empty.  Each candidate file is written to ``exp_NNNN.py`` before its row, so a ``kill -9``
  between the row and its commit is repaired by ``Workspace.recover``; experiments in flight
  at a kill are lost and the rerun resumes from the last row.

A command agent edits ``kernel.py`` in place, so each slot gives it its own git clone of the
workspace (``logs/<run>/slots/<n>``), reset to the branch head before each proposal.
"""
from __future__ import annotations

import queue
import shutil
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agents.base import AgentExhausted, AgentRefused, NoProposal, Proposal
from ..orchestrator import after_experiment, choose, pick_next
from . import interrupts
from .executor import EvalJob, Lanes, make_executor
from .problem_run import ProblemRun, initial_state
from .progress import progress_line, slots_line
from .summary import agent_unreachable_s
from .verdict import decide
from .workspace import Workspace

SLOTS_LINE_EVERY_S = 20.0
CONCURRENT_AGENTS = ("llm", "command")  # agents whose propose() may run in several threads at once


@dataclass
class Ticket:
    """One experiment in flight."""

    run: ProblemRun
    seq: int  # per problem, in the order experiments were started
    slot: int
    experiment: int  # the number the agent was told
    t0: float
    presses: int  # Ctrl-C presses when it started
    commit: str  # workspace head it started from
    version: int  # keeps of the problem when its incumbent was read
    incumbent_source: str | None  # None: no correct incumbent to compare with
    context: Any = None
    baseline: bool = False
    proposal: Proposal | None = None
    evaluation: Any = None
    lane: int = -1
    stop: AgentExhausted | None = None
    skipped: bool = False  # no proposal came (NoProposal): no row
    rejudged: int = 0  # times judged again against a newer incumbent


def agent_is_concurrent(agent) -> bool:
    flag = getattr(agent, "concurrent_proposals", None)
    return bool(flag) if flag is not None else getattr(agent, "name", "") in CONCURRENT_AGENTS


def agent_edits_in_place(agent) -> bool:
    flag = getattr(agent, "edits_in_place", None)
    return bool(flag) if flag is not None else getattr(agent, "name", "") == "command"


class SlotTrees:
    """A git clone of the workspace per slot, for agents that edit files in place.

    A clone, not a ``git worktree``: worktrees share the branches, and an agent's clean-up
    (``agents/command.py`` puts every ref back as it found it) would move the run branch back
    over commits the loop made meanwhile.  The clone shares the workspace's objects
    (``--shared``), so any commit of the run can be checked out in it at once."""

    def __init__(self, ws: Workspace):
        self.ws = ws
        self.root = ws.root / "logs" / ws.run_name / "slots"
        self.paths: dict[int, Path] = {}

    def prepare(self, slot: int, name: str) -> Path:
        """The slot's copy of problems/<name>, at the branch head and clean."""
        from .workspace import git

        path = self.root / str(slot)
        head = self.ws.head(short=False)
        if slot not in self.paths:
            if path.exists():
                shutil.rmtree(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            git(self.ws.root, "clone", "-q", "--shared", "--no-checkout", str(self.ws.root), str(path))
            self.paths[slot] = path
        git(path, "checkout", "-q", "-f", "--detach", head)
        git(path, "clean", "-fdq")
        return path / "problems" / name

    def close(self) -> None:
        for path in self.paths.values():
            shutil.rmtree(path, ignore_errors=True)
        self.paths.clear()


class Scheduler:
    def __init__(self, session, lanes: Lanes, stats):
        self.s = session
        self.stats = stats
        self.executor = make_executor(lanes, session.factory)
        stats.use_lanes(self.executor.names)
        self.width = lanes.parallel or len(self.executor.names)
        stats.parallel = self.width
        self.device = lanes.device
        self.done: queue.Queue[Ticket] = queue.Queue()
        self.activity: list[tuple[str, str, float] | None] = [None] * self.width
        self.free = list(range(self.width))
        self.in_flight: dict[str, int] = {r.name: 0 for r in session.runs}
        self.next_seq: dict[str, int] = {r.name: 0 for r in session.runs}
        self.issued: dict[str, int] = {r.name: 0 for r in session.runs}
        self.waiting: dict[str, dict[int, Ticket]] = {r.name: {} for r in session.runs}
        self.rejudge: list[Ticket] = []
        self.agent_lock = nullcontext() if agent_is_concurrent(session.agent) else threading.Lock()
        self.trees = SlotTrees(session.ws) if agent_edits_in_place(session.agent) else None
        self.stop_reason: str | None = None
        self.stop_message = ""
        self._last_slots_line = time.monotonic()
        self.head = session.ws.head()  # the branch head, kept up to date by _write (saves a git call per start)
        if lanes.gpus is not None and getattr(session.agent, "screen", False) is None:
            # the tuner's screen times configurations in a process of its own, on no GPU in particular:
            # beside the lanes it would share a GPU with a timing, so it is off here
            session.agent.screen = False
            session.printer.line("tuner: screening off while experiments run on several lanes (its timings "
                                 "would share a GPU with a lane's)")

    # ---------------------------------------------------------------- the driver
    def run(self) -> tuple[str, str]:
        s = self.s
        try:
            from .optimize import first_evaluation_order

            missing = first_evaluation_order(s)
            for run in missing:
                self._wait_for_slot()
                if s.out_of_time():
                    self._drain_all()
                    return "budget", ""
                self._start(run, baseline=True)
            self._drain_all()
            for run in missing:
                run.state = initial_state(run, run.state)
            s.share_time()
            while True:
                while self.free and self.stop_reason is None:
                    if self.rejudge:
                        self._start_rejudge(self.rejudge.pop(0))
                        continue
                    if s.out_of_time():
                        self.stop_reason = "budget"
                        break
                    name = self._pick()
                    if name is None:
                        break
                    self._start(s.run_named(name))
                while self.free and self.rejudge:
                    self._start_rejudge(self.rejudge.pop(0))
                if self.free and len(self.free) == self.width and not self.rejudge:
                    break  # nothing in flight and nothing to start
                self._handle(self._next_done())
            if self.stop_reason is None:
                open_runs = [r for r in s.runs if r not in s.capped()]
                return s.stop_note(open_runs)
            return self.stop_reason, self.stop_message
        finally:
            self.executor.close()
            if self.trees is not None:
                self.trees.close()

    def _pick(self) -> str | None:
        s = self.s
        cap = s.max_experiments
        open_runs = [r for r in s.runs if cap is None or r.experiments + self.in_flight[r.name] < cap]
        busy = any(self.in_flight.values())
        if pick_next([r.state for r in open_runs], self.in_flight) is None and busy:
            return None  # everything parked for now: wait for the experiments in flight
        name, states = choose([r.state for r in open_runs], s.remaining(), self.in_flight)
        for r, state in zip(open_runs, states):
            r.state = state
        return name

    def _wait_for_slot(self) -> None:
        while not self.free:
            self._handle(self._next_done())

    def _drain_all(self) -> None:
        while len(self.free) < self.width or self.rejudge:
            while self.free and self.rejudge:
                self._start_rejudge(self.rejudge.pop(0))
            if len(self.free) == self.width:
                break
            self._handle(self._next_done())

    def _next_done(self) -> Ticket:
        while True:
            self._show_slots()
            try:
                return self.done.get(timeout=1.0)
            except queue.Empty:
                pass

    def _show_slots(self) -> None:
        """Every SLOTS_LINE_EVERY_S: what each slot is doing."""
        now = time.monotonic()
        if now - self._last_slots_line >= SLOTS_LINE_EVERY_S:
            self._last_slots_line = now
            self.s.printer.line(slots_line(self.activity, now))

    # ---------------------------------------------------------------- starting work
    def _start(self, run: ProblemRun, baseline: bool = False) -> None:
        s = self.s
        slot = self.free.pop(0)
        outstanding = self.issued[run.name] - self.next_seq[run.name]
        ticket = Ticket(run=run, seq=self.issued[run.name], slot=slot, experiment=run.next_experiment + outstanding,
                        t0=time.monotonic(), presses=interrupts.pressed(), commit=self.head, version=run.keeps,
                        incumbent_source=s.ws.kernel_path(run.name).read_text() if run.best_correct else None,
                        baseline=baseline)
        if baseline:
            ticket.proposal = Proposal(source=s.ws.kernel_path(run.name).read_text(), description="starting kernel")
            ticket.incumbent_source = None
        else:
            problem_dir = self.trees.prepare(slot, run.name) if self.trees is not None else None
            ticket.context = s.context(run, ticket.experiment, problem_dir)
        self.issued[run.name] += 1
        self.in_flight[run.name] += 1
        self.activity[slot] = (run.name, "proposing" if not baseline else "baseline", ticket.t0)
        threading.Thread(target=self._work, args=(ticket,), daemon=True, name=f"autokernel-slot-{slot}").start()

    def _start_rejudge(self, ticket: Ticket) -> None:
        run = ticket.run
        ticket.slot = self.free.pop(0)
        ticket.version = run.keeps
        ticket.commit = self.head  # the row names the incumbent it is now compared with
        ticket.incumbent_source = self.s.ws.kernel_path(run.name).read_text() if run.best_correct else None
        ticket.evaluation = None
        ticket.rejudged += 1
        self.activity[ticket.slot] = (run.name, "judging again", time.monotonic())
        threading.Thread(target=self._work, args=(ticket,), daemon=True,
                         name=f"autokernel-slot-{ticket.slot}").start()

    def _work(self, t: Ticket) -> None:
        """In a slot thread: propose (unless done already), then evaluate."""
        try:
            if t.proposal is None:
                gone = agent_unreachable_s(self.s.agent)
                try:
                    with self.agent_lock:
                        t.proposal = self.s.agent.propose(t.context)
                    t.t0 += agent_unreachable_s(self.s.agent) - gone  # an outage is not the experiment's time
                except AgentExhausted as exc:
                    t.stop = exc
                    return
                except NoProposal:
                    t.skipped = True
                    return
                except Exception as exc:
                    t.proposal = Proposal(source=None, description="agent error",
                                          rejected_reason=f"{type(exc).__name__}: {exc}")
            if t.proposal.source is None:
                return
            job = EvalJob(spec=t.run.target.spec, kernel_source=t.proposal.source,
                          incumbent_source=t.incumbent_source,
                          evaluator=t.run.evaluator_kwargs(self.device, self.s.timeout_s),
                          label=f"{t.run.name} exp {t.experiment}")
            self.activity[t.slot] = (t.run.name, "waiting for a lane", time.monotonic())

            def on_lane(lane: int) -> None:
                self.activity[t.slot] = (t.run.name, f"evaluating on {self.executor.names[lane]}", time.monotonic())

            outcome = self.executor.evaluate(job, on_lane)
            t.evaluation, t.lane = outcome.evaluation, outcome.lane
            self.stats.evaluated(outcome.lane, outcome.seconds)
        except BaseException as exc:  # never lose the ticket: the driver waits for it
            if t.proposal is not None and t.proposal.source is not None and t.evaluation is None:
                from .executor import crash_evaluation

                t.evaluation = crash_evaluation(EvalJob(t.run.target.spec, t.proposal.source, None, {}),
                                                f"the evaluation could not run: {type(exc).__name__}: {exc}")
        finally:
            self.done.put(t)

    # ---------------------------------------------------------------- recording, in order
    def _handle(self, t: Ticket) -> None:
        self.free.append(t.slot)
        self.free.sort()
        self.activity[t.slot] = None
        self.waiting[t.run.name][t.seq] = t
        self._record_ready(t.run)

    def _record_ready(self, run: ProblemRun) -> None:
        waiting = self.waiting[run.name]
        while self.next_seq[run.name] in waiting:
            t = waiting[self.next_seq[run.name]]
            if self._needs_rejudge(t):
                del waiting[t.seq]
                self.rejudge.append(t)  # keeps its place: later rows wait until it is judged again
                return
            del waiting[t.seq]
            self.next_seq[run.name] += 1
            self.in_flight[run.name] -= 1
            self._settle(t)

    def _needs_rejudge(self, t: Ticket) -> bool:
        if t.baseline or t.evaluation is None or t.version == t.run.keeps:
            return False
        return decide(t.evaluation, incumbent_correct=t.incumbent_source is not None) == "keep"

    def _settle(self, t: Ticket) -> None:
        s, run = self.s, t.run
        if t.stop is not None:
            if self.stop_reason is None:
                self.stop_reason = "agent-refused" if isinstance(t.stop, AgentRefused) else "agent-exhausted"
                self.stop_message = str(t.stop)
            return
        if t.skipped:
            return
        proposal = t.proposal
        if t.baseline:
            from .optimize import baseline_description

            self._write(t, "baseline", baseline_description(t.evaluation, self.s.timeout_s, self.device),
                        "starting kernel")
            return
        if proposal.source is None and (proposal.rejected_reason or "").startswith("search space exhausted"):
            run.state = after_experiment(run.state, improved=False, seconds=0.0, exhausted=True)
            run.note = proposal.rejected_reason
            s.printer.line(f"{run.name}: {run.note}; done with this problem")
            return
        if proposal.source is None:
            reason = proposal.rejected_reason or "the agent produced no kernel"
            self.stats.rejected += 1
            self._write(t, "rejected", f"{proposal.description} (rejected: {reason})", proposal.description, reason)
            return
        current = t.incumbent_source is not None and t.version == run.keeps
        status = decide(t.evaluation, incumbent_correct=t.incumbent_source is not None,
                        incumbent_us=run.best_row.latency_us if current and run.best_correct else None)
        description = proposal.description
        if status == "revert" and t.version != run.keeps:
            description += " (lost to an earlier incumbent)"
        elif t.rejudged and status in ("keep", "revert"):
            description += " (judged again against the new incumbent)"
        self._write(t, status, description, proposal.description)

    def _write(self, t: Ticket, status: str, description: str, memory: str, reason: str = "") -> None:
        s, run = self.s, t.run
        experiment = 0 if t.baseline else run.next_experiment
        candidate = None
        if t.proposal is not None and t.proposal.source is not None:
            candidate = s.ws.candidate_path(run.name, experiment)
            candidate.write_text(t.proposal.source)  # before the row: recovery finds a keep's kernel here
        s.ws.save_evaluation(run.name, experiment, t.evaluation)
        wall = time.monotonic() - t.t0
        record = run.record(experiment, s.agent_name, status, t.evaluation, wall,
                            t.proposal.tokens if t.proposal is not None else 0, t.commit, description)
        self.head = s.write(run, record, t.evaluation, candidate if status == "keep" else None, t.presses, memory,
                            reason)
        if not t.baseline:
            self.stats.experiments += 1
            run.state = after_experiment(run.state, improved=status == "keep", seconds=wall / self.width,
                                         pct_roofline=record.pct_roofline, best_speedup=record.speedup_vs_start)
        comparison = t.evaluation.vs_incumbent if t.evaluation is not None else None
        s.printer.line(progress_line(run, record, s.deadline, comparison) + f"  [slot {t.slot}]")
        stuck = run.done_if_stuck()
        if stuck is not None:
            s.printer.line(f"{run.name}: {stuck}; done with this problem")


def run_parallel(session, lanes: Lanes, stats) -> tuple[str, str]:
    return Scheduler(session, lanes, stats).run()
