"""``evaluate`` and ``Evaluator``: judge one kernel file (DESIGN §5).

Order of an evaluation:

1. *load* — the file is read once; a file that does not parse is ``incorrect`` at stage
   ``load``.  Static checks (integrity.static_findings) run on that text: a finding is
   ``rejected`` at stage ``static``.  The worker then executes exactly that text as a fresh
   module; an import error or a missing ``kernel_fn`` is ``incorrect`` at ``load``.
2. the correctness stages of stages.py, stopping at the first failure (``incorrect``) or
   integrity finding (``rejected``);
3. *timing* (when asked and everything passed): the target shapes (or ``shapes=``) at the first
   dtype.  Every timed call is a judged call (worker.py): fresh input sets, each used once, in
   requests sized to the memory budget (memory.py); the watch, the poison, the launch proof and the
   allocation/aliasing checks on every call; about ``CHECKED_PER_SHAPE`` calls per shape, drawn
   after the calls were made, get their outputs compared (``cached-output`` if wrong) and their
   inputs checked; runs of calls whose inputs are the call before's memory rewritten (its
   integer tensors and scalars, new floating-point values: ``REWRITE_RUNS_PER_SHAPE``; PyTorch
   2.12 on, ``timed_rewrites``) come at random points among them, each one checked.  The parent's wall clock around each request must
   cover the reported times (``timing-mismatch``).  Roofline per shape; eager / torch.compile
   baselines (baselines.py); a GPU time under 0.95x the floor is ``below-floor``.  With
   ``incumbent_file`` the incumbent runs in its own worker, interleaved round by round with the
   candidate's, and ``vs_incumbent``
   says whether the candidate is faster by more than the noise with the parent's wall clock
   confirming the gain.  ``stop_at_loss`` (the loop): with an incumbent, a *screen* comes right
   after smoke, the pair timed with no timed call's outputs compared; a candidate it finds not
   faster is ``slower`` and judged no further, any other goes on to the stages and the checked
   timing, which alone decides (``Evaluator._screen``).

Every evaluation gets a fresh worker (forked from a pristine forkserver; the next one is started
while this evaluation runs); the worker is killed afterwards, never reused for another kernel.
Timeouts are per request to the worker: every call (or batch of calls) of the kernel must
answer within ``timeout_s`` for every four calls of the request (``stages.request_deadline``).  A hang
kills the worker: ``timeout``.  A dead worker (signal, abort, CUDA fault): ``crash``.

Score: ``score_us = sum(weight * median latency)`` over the timed shapes (weights default to 1
and align with ``shapes=``).  Problem specs: a built-in kind, a problem file path, a
``package.module:factory`` import path (tests), or a ``Problem`` object.
"""
from __future__ import annotations

import os
import platform
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from .. import __version__
from ..hardware import ceilings, current_device_name, resolve_device
from ..problems.base import Problem, Shape, dtype_name, parse_dtype
from . import baselines as baselines_mod
from . import compile_ahead as compile_ahead_mod
from . import integrity, memory, roofline, stages, timing
from .records import Evaluation, Finding, ShapeTiming
from .problem_spec import can_take_memory, draw_set
from .worker import Worker, WorkerCrash, WorkerTimeout, acquire, load_problem, prestart, release

TIMING_SETS = 3  # input sets for the eager / torch.compile baselines
INTERLEAVED_ROUNDS = {"gpu": 6, "interpreter": 3}
# Where the planned rounds' median says the candidate is faster but their spread is as large as the
# gain (``timing.undecided``), this many times as many rounds again: the interpreter's 3 rounds put
# one slow round inside the 20-80 percentile range (a 5x faster kernel, one call held up by the
# machine, was reverted), 6 or more leave one out at each end.
EXTRA_ROUNDS = 1
WARM_CALLS = {"gpu": 2, "interpreter": 1}
# Timed calls whose outputs are compared, per shape, on average (each call drawn independently,
# after the calls were made): a kernel that cheats on the half of its calls it needs to move the
# median escapes with probability about exp(-CHECKED_PER_SHAPE / 2) per shape, and every call
# runs under the watch, the poison and the launch and allocation checks regardless.
CHECKED_PER_SHAPE = 8
# Timed calls drawn from the problem's numerics cases (large, tiny, NaN... values), per shape on
# average, each one checked: a kernel that tells timed calls from correctness calls (by the order
# of the judge's shapes, by where its inputs live) cannot keep the code that handles such values
# for the calls it takes for checks (a softmax without its max subtraction on timed calls passed).
# They walk through every variant of the shape's cases, from a random start.
NUMERICS_PER_SHAPE = 8
# Runs of timed calls whose inputs are the call before's memory rewritten (new floating-point
# values, the same integer tensors and scalars: ``problem_spec.rewritten_set``), started per shape
# on average, each call of a run checked: a model's caching allocator hands a layer's freed input
# buffers out again, call after call, so a result kept by the inputs' addresses and scalars is
# stale there.  The smoke stage's rewrites alone came at a fixed point, and a memo that stayed off
# for its first calls passed every stage (red-team pass 29).  A run goes on past each call with
# probability ``REWRITE_GOES_ON`` (runs of any length, as a decoding loop's: a memo that waited for
# the third call at one address met none when rewrites never came twice in a row).  Only a call
# after a regular one of its request can be one; on the CPU's plan (three calls a request, all of
# them numerics draws) none is, and the evaluation's last calls carry the pattern there.
REWRITE_RUNS_PER_SHAPE = 3
REWRITE_GOES_ON = 0.6


def timed_rewrites() -> bool:
    """Are there timed rewrites here: only where the worker puts the rewritten set at the
    previous call's addresses itself (PyTorch 2.12 on: ``problem_spec.can_take_memory``).
    Without that the previous set's memory went back to the allocator, which on an H100 (PyTorch
    2.11) handed it to the next call's output, and every honest starter failed as
    "cached-output" (2026-12-07); the evaluation's last calls, in place, remain there."""
    return can_take_memory()


class _IncumbentFailed(Exception):
    pass


def _timed_name(seed: Any) -> str:
    if isinstance(seed, dict):
        return "timed, the previous call's input memory rewritten"
    return "timed" if isinstance(seed, int) else f"timed, numerics variant {seed[1]}"


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def versions() -> dict[str, str]:
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "autokernel": __version__}


def worker_spec(spec: Any, problem: Problem) -> str | None:
    """How the worker finds the problem again (it needs ``make_kernel`` for some kinds)."""
    if isinstance(spec, Problem):
        if spec.source == "builtin":
            return spec.kind
        path = spec.source.split(":", 1)[-1] if spec.source.startswith("kernelbench:") else spec.source
        return str(Path(path).resolve()) if Path(path).is_file() else None
    text = str(spec)
    if Path(text).is_file():
        return str(Path(text).resolve())
    return text


def _shapes(problem: Problem, shapes: Sequence[Any] | None, device: str) -> list[Shape]:
    if not shapes:
        return [dict(s) for s in problem.shapes_for(device)]
    return [problem.parse_shape(s) if isinstance(s, str) else problem.shape_of(s) for s in shapes]


def _dtypes(problem: Problem, dtypes: Sequence[Any] | None) -> list[torch.dtype]:
    if not dtypes:
        return list(problem.dtypes)
    return [d if isinstance(d, torch.dtype) else parse_dtype(str(d)) for d in dtypes]


def _new_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") % (2 ** 31 - 20_000_000)


class Evaluator:
    """Judges kernel files for one problem.  Every evaluation gets a fresh worker process
    (started in the background while the previous evaluation ran); the incumbent runs in a
    worker of its own, kept while the incumbent file stays the same."""

    def __init__(self, problem_spec: Any, *, device: str = "auto", shapes: Sequence[Any] | None = None,
                 dtypes: Sequence[Any] | None = None, timeout_s: float = 60.0, timing: bool = True,
                 baselines: bool = True, weights: Sequence[float] | None = None, prestart: bool = True,
                 compile_timeout_s: float = 600.0, memory_budget: int | None = None,
                 writable: Sequence[Any] = (), compile_ahead: int | None = None, stop_at_loss: bool = False):
        # with an incumbent: time the pair right after smoke, and judge no further a candidate whose
        # rounds already rule out a gain (verdict ``slower``): the loop's reverts skip five stages
        self.stop_at_loss = stop_at_loss
        # folders the kernel's code may write files in (a test's spy log); nowhere else: a kernel
        # that writes files reaches the incumbent's kernel file and the caches the judge reads
        self.writable = tuple(str(Path(d).resolve()) for d in writable)
        self.memory_budget = memory_budget  # bytes the judge may plan with; None: measured per evaluation (memory.py)
        self.compile_timeout_s = float(compile_timeout_s)  # importing the file (load_inline builds) may take this long
        self.problem = load_problem(problem_spec)
        self.spec = worker_spec(problem_spec, self.problem)
        if self.spec is None and self.problem.make_kernel is not None:
            raise ValueError("this Problem object cannot be rebuilt in the worker; pass its kind or file path")
        self.device = resolve_device(device)
        self.shapes = _shapes(self.problem, shapes, self.device)
        if not self.shapes:
            raise ValueError(f"problem {self.problem.kind} has no shapes for device {self.device}")
        self.dtypes = _dtypes(self.problem, dtypes)
        self.weights = [float(w) for w in weights] if weights is not None else [1.0] * len(self.shapes)
        if len(self.weights) != len(self.shapes):
            raise ValueError(f"{len(self.weights)} weight(s) for {len(self.shapes)} shape(s)")
        self.timeout_s = float(timeout_s)
        # time.monotonic() past which no request is waited for (None: none): the loop sets the
        # budget's end here, so one evaluation cannot outlast the run's budget (a timeout then)
        self.deadline: float | None = None
        self.timing = timing
        self.baselines = baselines
        self.prestart = prestart
        # helper workers that compile a new file's later shapes while its own worker runs the
        # first stages (compile_ahead.py); by default only on a GPU, where Triton compiles, and
        # only where AUTOKERNEL_COMPILE_AHEAD asks for them (not yet measured on a GPU)
        if compile_ahead is None:
            asked = compile_ahead_mod.helpers_asked()  # read on every device: a typo fails where it is made
            compile_ahead = asked if self.device.startswith("cuda") else 0
        self.compile_ahead = compile_ahead if self.problem.forbidden_ops is None else 0
        self._ahead: compile_ahead_mod.CompileAhead | None = None
        self.last_ahead_calls = 0  # calls the last evaluation's helpers finished
        self.device_name = current_device_name(self.device)
        self.memory_plan: memory.MemoryPlan | None = None  # how the last evaluation fitted its budget
        self._worker: Worker | None = None
        self._incumbent: tuple[str, Worker] | None = None  # (source text, its own worker)
        self._incumbent_text: str | None = None  # the incumbent's file as read before this evaluation's candidate ran
        self._evaluations = 0
        self.last_round_trips = 0  # requests the last evaluation sent to the candidate's worker
        self._timer: timing.Timer | None = None
        self._baselines_s = self._checks_s = 0.0  # the timing's baselines and its sampled calls' checks, seconds
        self._timing_stopped = False  # the last pair's rounds were cut short at a loss
        self._stage = "load"
        self._rng = random.SystemRandom()
        self._variants: dict[tuple, int] = {}  # (shape, dtype) -> how many numerics cases the problem draws
        self._variant_at: dict[tuple, int] = {}  # (shape, dtype) -> the next numerics case a timed call gets

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Kill the workers this Evaluator used (a worker is never handed to another kernel)."""
        self._drop_worker(restart=False)
        self._drop_incumbent()

    def _ensure_worker(self) -> Worker:
        if self._worker is None:
            self._worker = acquire(self.device)
            if self.prestart and self._evaluations > 0:
                prestart(self.device)  # the next evaluation's worker imports torch while this one runs
        self._worker.deadline = self.deadline
        return self._worker

    def _drop_worker(self, restart: bool = True) -> None:
        if self._worker is not None:
            release(self._worker)
            self._worker = None
        if restart and self.prestart:
            prestart(self.device)

    def _drop_incumbent(self) -> None:
        if self._incumbent is not None:
            release(self._incumbent[1])
            self._incumbent = None

    # ------------------------------------------------------------------ evaluate
    def evaluate(self, kernel_file: str | Path, incumbent_file: str | Path | None = None) -> Evaluation:
        started = time.perf_counter()
        path = Path(kernel_file).resolve()
        ev = Evaluation(problem=self.problem.kind, kernel_file=str(kernel_file), correct=False, verdict="incorrect",
                        device=self.device, device_name=self.device_name, versions=versions())
        self._stage = "load"
        self._build_dir = tempfile.mkdtemp(prefix="autokernel-build-")
        incumbent = Path(incumbent_file).resolve() if incumbent_file else None
        # the incumbent's text, read before the candidate runs: what is timed is the file as it was
        # (a candidate that rewrote it while it loaded made the incumbent sleep:
        # tests/attacks/reduce_pass9_mock_rule_off.py)
        self._incumbent_text = _read_text(incumbent) if incumbent is not None else None
        try:
            self._evaluate(ev, path, incumbent)
            if incumbent is not None and _read_text(incumbent) != self._incumbent_text:
                self._drop_timings(ev)
                self._reject(ev, self._stage, Finding("monkey-patch", f"the incumbent's file {incumbent.name} "
                                                      "changed while the candidate was judged: files are the judge's"))
        except WorkerTimeout:
            self._drop_worker()
            ev.correct, ev.verdict, ev.failed_stage = False, "timeout", self._stage
            ev.message = f"no answer within {self.timeout_s:g} s during stage {self._stage}: the worker was killed"
            if self.deadline is not None and time.monotonic() >= self.deadline:
                ev.message = f"stopped during stage {self._stage}: the run's time budget ended (the worker was killed)"
            ev.timings, ev.score_us = [], None
        except (WorkerCrash, stages.CudaFault) as exc:
            self._drop_worker()
            ev.correct, ev.verdict, ev.failed_stage = False, "crash", self._stage
            ev.message = f"{exc} during stage {self._stage}"
            ev.timings, ev.score_us = [], None
        except stages.OUT_OF_MEMORY as exc:
            # the plan's estimate was short: the verdict says so, the judge does not crash
            ev.correct, ev.verdict, ev.failed_stage = False, "incorrect", self._stage
            ev.message = (f"the judge ran out of memory during stage {self._stage} "
                          f"({' '.join(str(exc).split())[:200]})")
            ev.timings, ev.score_us = [], None
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
        except RuntimeError as exc:
            if not str(exc).startswith("harness worker error"):
                raise
            # the worker failed in our own code; the kernel may have provoked it: its verdict, not the loop's end
            ev.correct, ev.verdict, ev.failed_stage = False, "crash", self._stage
            ev.message = f"{str(exc).splitlines()[0]} during stage {self._stage}"
            ev.timings, ev.score_us = [], None
        finally:
            self._stop_ahead()
            shutil.rmtree(self._build_dir, ignore_errors=True)
            self._evaluations += 1
            self.last_round_trips = self._worker.requests if self._worker is not None else 0
            self._drop_worker()  # one worker, one kernel: never reused
        ev.wall_s = round(time.perf_counter() - started, 3)
        return ev

    def _evaluate(self, ev: Evaluation, path: Path, incumbent: Path | None) -> None:
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            ev.failed_stage, ev.message = "load", f"cannot read kernel file: {exc}"
            return
        try:
            # native code only where the problem allows other backends (KernelBench --allow-torch)
            found = integrity.static_findings(source, path.name, native_code=True) \
                if self.problem.forbidden_ops is not None else integrity.static_findings(source, path.name)
        except SyntaxError as exc:
            ev.failed_stage = "load"
            ev.message = f"SyntaxError: {exc.msg} ({path.name}:{exc.lineno})"
            return
        if found:
            ev.integrity = [Finding(f.rule, f.message) for f in found]
            ev.verdict, ev.failed_stage = "rejected", "static"
            ev.message = "; ".join(f"{f.rule}: {f.message}" for f in found[:3])
            return
        phase_from = time.perf_counter()

        def phase(name: str) -> None:
            nonlocal phase_from
            now = time.perf_counter()
            ev.phases[name] = round(ev.phases.get(name, 0.0) + now - phase_from, 3)
            phase_from = now

        worker = self._ensure_worker()
        reply = worker.request({"op": "load", "slot": "candidate", "path": str(path), "source": source,
                                "problem": self.spec, "build_dir": self._build_dir,
                                "native_code": self.problem.forbidden_ops is not None, "writable": self.writable},
                               max(self.timeout_s, self.compile_timeout_s))
        if reply.get("tampered"):
            return self._reject(ev, "load", Finding("monkey-patch", "importing the kernel file replaced "
                                                    + ", ".join(reply["tampered"])))
        for finding in reply.get("findings") or []:  # e.g. a process started while the file loaded
            return self._reject(ev, "load", Finding(str(finding["rule"]), str(finding["message"])))
        if "error" in reply:
            ev.failed_stage, ev.message = "load", reply["error"]
            return
        phase("load")
        seed, heldout_seed = _new_seed(), _new_seed()
        judge = stages.Judge(self.problem, self.device, worker, self.timeout_s, seed, self.memory_budget)
        plan = stages.StagePlan(self.shapes, self.dtypes, heldout_seed)
        self._stage = "memory"
        try:
            self.memory_plan = judge.plan_memory(plan)
        except stages.MemoryShortfall as exc:
            self.memory_plan = judge.memory_plan
            ev.failed_stage, ev.message = "memory", str(exc)
            return
        screen_first = self.stop_at_loss and self.timing and incumbent is not None
        screened = False

        def start_ahead() -> None:
            helpers = compile_ahead_mod.helpers_that_fit(self.compile_ahead, self.memory_plan)
            if helpers:
                load = {"op": "load", "slot": "candidate", "path": str(path), "source": source, "problem": self.spec,
                        "build_dir": self._build_dir, "native_code": False, "writable": self.writable}
                cases = compile_ahead_mod.cases_ahead(self.problem, plan, self.device)
                self._ahead = compile_ahead_mod.start(lambda: Worker(self.device), load, cases, helpers, _new_seed())

        if not screen_first:
            start_ahead()
        for name, run_stage in stages.STAGE_FUNCTIONS:
            if screen_first and name != "smoke" and not screened:
                screened = True
                if not self._screen(ev, judge, incumbent, phase):
                    return
                start_ahead()
            self._stage = name
            tally = stages.StageTally(name)
            try:
                message = run_stage(judge, plan, tally)
                phase("stages")
            except stages.CaseFailure as exc:
                ev.stages.append(tally.result(False, f"{exc} [{exc.label}]"))
                ev.failed_stage, ev.message = name, f"{name}: {exc} [{exc.label}]"
                return self._drop_timings(ev)
            except stages.Rejection as exc:
                ev.stages.append(tally.result(False, str(exc)))
                self._drop_timings(ev)
                return self._reject(ev, name, exc.finding)
            if name == "smoke":
                message += f" (input seed {seed})" + memory.describe_plan(self.memory_plan)
            ev.stages.append(tally.result(True, message))
        timing_notes = ev.message
        ev.correct, ev.verdict = True, "pass"
        ev.message = f"passed {len(ev.stages)} stages" + timing_notes
        self._stop_ahead()  # before any timed call: the helpers would share the GPU with it
        if self.timing:
            if not self._run_timing(ev, judge, incumbent, phase):
                return
            if screened:
                ev.message += "; screened against the incumbent first (its timed calls unchecked)"
        self._late_rewrites(ev, judge, plan, phase)

    def _late_rewrites(self, ev: Evaluation, judge: stages.Judge, plan: stages.StagePlan, phase) -> None:
        """The evaluation's last calls (``stages.late_rewrites``), reported as the stage they
        follow: ``timing`` when it ran, else ``heldout``."""
        stage = "timing" if self.timing else "heldout"
        self._stage = stage
        try:
            stages.late_rewrites(judge, plan)
        except stages.CaseFailure as exc:
            self._drop_timings(ev)
            ev.correct, ev.verdict, ev.failed_stage = False, "incorrect", stage
            ev.message = f"{stage}: the evaluation's last calls (inputs rewritten in place): {exc} [{exc.label}]"
        except stages.Rejection as exc:
            self._drop_timings(ev)
            self._reject(ev, stage, exc.finding)
        phase("stages")

    def _screen(self, ev: Evaluation, judge: stages.Judge, incumbent: Path, phase) -> bool:
        """The loop's first look at a candidate that has passed smoke: the pair timed as the
        timing stage times it, with every call judged in the worker but no timed call's outputs
        compared here (those comparisons were most of a timed call's cost), and the rounds cut
        short once they rule out a gain.  A candidate the screen finds not faster beyond the
        noise (``_may_be_faster``) is ``slower`` (False): it cannot be kept, whatever the stages
        would find.  One that may be faster goes on to the stages and the checked timing, which alone decides:
        what the screen measured is dropped, so a kernel that cheats on the screen's calls
        gains nothing by it."""
        if not self._run_timing(ev, judge, incumbent, phase, checked=False):
            return False
        if ev.vs_incumbent is None or self._may_be_faster(ev.vs_incumbent):
            self._drop_timings(ev)
            ev.message = ""
            return True
        ev.correct, ev.verdict = False, "slower"
        ev.message = ("not faster than the incumbent beyond the noise; the stages after smoke were not run"
                      + ev.message)
        return False

    def _may_be_faster(self, comparison: Any) -> bool:
        """The screen's pass: a significant gain, or a median ratio under ``1 - MIN_GAIN`` over
        rounds that ran to the end.  Looser than the keep rule on purpose: the checked timing
        decides again on samples of its own, and asking both to be significant would keep a
        real gain with the square of one test's power (an interpreter's noisy rounds reverted a
        kernel twice as fast in CI)."""
        return comparison.significant or (not self._timing_stopped and comparison.median_ratio is not None
                                          and comparison.median_ratio < 1.0 - timing.MIN_GAIN)

    def _run_timing(self, ev: Evaluation, judge: stages.Judge, incumbent: Path | None, phase,
                    checked: bool = True) -> bool:
        """Time the candidate (against ``incumbent``); False when timing found it incorrect or
        rejected it (``ev`` says so).  The timing's notes are appended to ``ev.message``.
        ``checked`` False: the screen's timing (``_screen``), no timed call's outputs compared."""
        self._stage = "timing"
        message, ev.message = ev.message, ""
        name = "timing" if checked else "screen"
        try:
            self._baselines_s = self._checks_s = 0.0
            self._time(ev, judge, incumbent, checked)
            phase(name)
            # disjoint phases: the timed calls' output checks and the baselines apart from the calls
            ev.phases[name] = round(ev.phases[name] - self._baselines_s - self._checks_s, 3)
            if checked:
                ev.phases["timing_checks"] = round(self._checks_s, 3)
                ev.phases["baselines"] = round(self._baselines_s, 3)
            ev.message = message + ev.message
            return True
        except stages.CaseFailure as exc:
            ev.correct, ev.verdict, ev.failed_stage = False, "incorrect", "timing"
            ev.message = f"timing: {exc} [{exc.label}]"
            self._drop_timings(ev)
        except stages.Rejection as exc:
            self._drop_timings(ev)
            self._reject(ev, "timing", exc.finding)
        return False

    @staticmethod
    def _drop_timings(ev: Evaluation) -> None:
        """Timings belong to a candidate judged correct (or found slower): none for a failed one."""
        ev.timings, ev.score_us, ev.eager_score_us, ev.compile_score_us, ev.vs_incumbent = [], None, None, None, None

    def _stop_ahead(self) -> None:
        if self._ahead is not None:
            self._ahead.stop()
            self.last_ahead_calls = sum(self._ahead.calls)
            self._ahead = None

    def _reject(self, ev: Evaluation, stage: str, finding: Finding) -> None:
        ev.correct, ev.verdict, ev.failed_stage = False, "rejected", stage
        ev.integrity.append(finding)
        ev.message = f"{finding.rule}: {finding.message}"

    # ------------------------------------------------------------------ timing
    def _incumbent_judge(self, incumbent: Path, seed: int, notes: list[str]) -> stages.Judge | None:
        """A Judge whose requests go to the incumbent's own worker (loaded once per incumbent
        text; the candidate never runs in it)."""
        source = self._incumbent_text
        if source is None:
            notes.append(f"incumbent not timed: cannot read {incumbent}")
            return None
        if self._incumbent is not None and (self._incumbent[0] != source or not self._incumbent[1].alive):
            self._drop_incumbent()
        try:
            if self._incumbent is None:
                worker = acquire(self.device)
                if self.prestart:
                    prestart(self.device)
                self._incumbent = (source, worker)
                worker.deadline = self.deadline
                judge = stages.Judge(self.problem, self.device, worker, self.timeout_s, seed)
                reply = judge.request({"op": "load", "slot": "incumbent", "path": str(incumbent), "source": source,
                                       "problem": self.spec, "native_code": self.problem.forbidden_ops is not None,
                                       "writable": self.writable})
                if "error" in reply or reply.get("findings"):
                    self._drop_incumbent()
                    notes.append(f"incumbent not timed: {reply.get('error') or reply['findings'][0]['message']}")
                    return None
            self._incumbent[1].deadline = self.deadline
            return stages.Judge(self.problem, self.device, self._incumbent[1], self.timeout_s, seed)
        except (WorkerCrash, WorkerTimeout, stages.Rejection, stages.CudaFault) as exc:
            self._drop_incumbent()
            notes.append(f"incumbent not timed: {exc}")
            return None

    def _batch(self, judge: stages.Judge, runner: stages.Judge, slot: str, shape: Shape, dtype: torch.dtype,
               n: int, check_p: float, warm_up: bool = False, numerics_p: float = 0.0,
               judged: bool = True, rewrite_p: float = 0.0) -> tuple[list[float], float]:
        """``n`` judged calls on ``n`` fresh input sets (split to fit the memory budget), sent to
        ``runner``'s worker, which draws each set itself from a seed of ours right before its
        call (``worker_main._draw``: no call can see a later call's inputs).  Each call is
        checked with probability ``check_p``, drawn here after the calls were made (every call
        when ``check_p`` is 1, as in the warm-up): this process draws the same set from the same seed,
        the worker copies that call's outputs and its inputs as they are now into our buffers,
        the inputs must equal our draw bit for bit (``modified-input``: written into, or drawn
        otherwise) and the outputs must match the reference on our draw.  Returns the reported
        per-call times and the wall time this process measured around them.  With probability
        ``numerics_p`` a call's set is one of the problem's numerics cases instead (``[seed,
        variant]``), and such a call is always checked; with probability ``rewrite_p`` a call after
        any but the first gets the previous call's memory rewritten, and a run of them goes on
        with probability ``REWRITE_GOES_ON`` (``{"rewrite": [root seed, seed]}``: the regular
        root's integer tensors and scalars, the floating-point values of the regular draw
        ``seed``), each always checked too; numerics calls come first, and on the CPU's plan every
        timed call is one (the evaluation's last calls rewrite in place there:
        ``stages.late_rewrites``)."""
        times: list[float] = []
        wall = 0.0
        first = judge.make_case(shape, dtype)
        meta = judge.meta(first)
        sizes = judge.sizes_of(first)
        del first
        history = judge.history(sizes.outputs)
        sent = self.spec is None  # a problem the worker cannot load by name: our own draws, sent and copied
        chunk = memory.timing_sets(sizes, judge.budget, history, self._incumbent_timed, judge.gpu, sent)
        if chunk < 1:
            if self._incumbent_timed:
                raise _IncumbentFailed(f"not enough memory to time it beside the candidate "
                                       f"({memory.fmt_bytes(judge.budget)} available)")
            chunk = 1  # one set fits: the correctness plan measured it
        variants = self._numerics_variants(judge, shape, dtype) if numerics_p > 0 else 0
        if variants:  # the worker draws every variant of the case to take one
            chunk = max(1, chunk - variants)
        if rewrite_p > 0:  # a rewrite draws two sets and copies their mix (``_previous_memory``)
            if chunk > 2:
                chunk -= 2
            else:  # no room: no rewrites (the evaluation's last calls, at the smallest shape, remain)
                rewrite_p = 0.0
        judge.timing_peak = max(judge.timing_peak, memory.timing_peak(sizes, chunk, history, self._incumbent_timed,
                                                                      sent))
        tol = self.problem.tolerance(dtype)
        label = f"shape={stages.format_shape(shape)} dtype={stages.dtype_name(dtype)} case=timed"
        while n > 0:
            k = min(n, chunk)
            n -= k
            # each drawn on its own: consecutive seeds would tell a kernel that recovered one draw's seed
            # every later call's inputs, and let it compute them all in one call (the median then a copy)
            seeds: list = [_new_seed() for _ in range(k)]
            numerics = {i for i in range(k) if variants and self._rng.random() < numerics_p}
            for i in sorted(numerics):
                seeds[i] = [seeds[i], self._next_variant(shape, dtype, variants)]
            # rewrites follow regular draws only: the mix of two numerics cases (one's scalars, another's
            # values) need not be within the tolerance of either (attention_rotary's starter failed one)
            rewrites: list[int] = []
            for i in range(1, k):
                if i in numerics or i - 1 in numerics or rewrite_p <= 0:
                    continue
                going_on = bool(rewrites) and rewrites[-1] == i - 1
                if self._rng.random() < (max(REWRITE_GOES_ON, rewrite_p) if going_on else rewrite_p):
                    rewrites.append(i)
            for i in rewrites:  # the previous call's integer tensors and scalars, new floating-point values
                before = seeds[i - 1]
                seeds[i] = {"rewrite": [before["rewrite"][0] if isinstance(before, dict) else before, seeds[i]]}
            sets = [self._draw_set(shape, dtype, seed) for seed in seeds] if sent else None
            message = runner.call_message(shape, dtype, sets, meta, slot=slot, draw=None if sets else seeds,
                                          rewrites=rewrites)
            runner.sync()
            started = time.perf_counter()
            reply = runner.request(message, stages.request_deadline(self.timeout_s, k))
            elapsed = time.perf_counter() - started
            if "error" in reply:
                raise stages.CaseFailure(f"the kernel raised {reply['error']} while being timed", "timing")
            if judged:
                judge.check_ops(reply["ops"], label)
                judge.check_call(reply, label)
            reported = [float(t) for t in reply["times_us"]]
            if len(reported) != k or not timing.reported_fits_wall(reported, elapsed):
                raise stages.Rejection("timing-mismatch", f"the worker reported {sum(reported):.0f} us for {k} call(s) "
                                       f"that took {elapsed * 1e6:.0f} us by the judge's clock ({label})")
            if not warm_up:  # warm-up calls compile: only the timed ones count
                self._calls_timed += k
                self._calls_uncovered += len(reply.get("uncovered") or [])
            picked = list(range(k)) if check_p >= 1.0 else \
                [i for i in range(k)
                 if self._rng.random() < check_p or ((i in numerics or i in rewrites) and check_p > 0)]
            checks_from = time.perf_counter()
            for group in ([picked] if judge.together else [[i] for i in picked]) if picked else []:
                self._check_timed(judge, group, seeds, shape, dtype, meta, tol, k)
            self._checks_s += time.perf_counter() - checks_from
            times += reported
            wall += elapsed
            self.last_kind = reply.get("kind", self.last_kind)
            del message, sets
        return times, wall

    def _draw_set(self, shape: Shape, dtype: torch.dtype, seed: Any) -> tuple:
        return draw_set(self.problem.make_inputs, self.problem.adversarial_inputs, shape, dtype, self.device, seed)

    def _numerics_variants(self, judge: stages.Judge, shape: Shape, dtype: torch.dtype) -> int:
        """How many numerics cases the problem draws at ``shape`` (0: none): as the numerics
        stage drew them, else counted once here."""
        key = (stages.format_shape(shape), dtype)
        if key in judge.numerics_variants:
            return judge.numerics_variants[key]
        if key not in self._variants:
            make = self.problem.adversarial_inputs
            self._variants[key] = len(make(dict(shape), dtype, self.device, _new_seed())) if make else 0
        return self._variants[key]

    def _next_variant(self, shape: Shape, dtype: torch.dtype, variants: int) -> int:
        key = (stages.format_shape(shape), dtype)
        at = self._variant_at.get(key, self._rng.randrange(variants))
        self._variant_at[key] = at + 1
        return at % variants

    def _check_timed(self, judge: stages.Judge, group: list[int], seeds: list, shape: Shape,
                     dtype: torch.dtype, meta: Any, tol: Any, k: int) -> None:
        """The named timed calls of the last request, checked on this process's own draws of
        their sets: each draw is fingerprinted (or cloned, as the memory plan says), then the
        worker copies the inputs it drew, as they are after the call, over it; they must be
        the same bits.  The reference is computed on them afterwards."""
        cases = [stages.Case(dict(shape), dtype, self._draw_set(shape, dtype, seeds[i]), _timed_name(seeds[i]))
                 for i in group]
        pristine = [judge.snapshot(stages.tensors_of(c.args)) for c in cases]
        label = cases[0].label
        outs = judge.collect(group, meta, label, inputs=[c.args for c in cases])
        for i, case, snap, got in zip(group, cases, pristine, outs):
            judge.check_inputs(case.args, snap, f"{case.label}, call {i} of {k}: written into, or drawn otherwise")
            verdict = stages.compare.compare_outputs(got, judge.reference(case.args), meta, tol, judge.chunk)
            if not verdict.ok:
                raise stages.Rejection("cached-output", f"timed call {i} of {k} (picked after the calls) gave "
                                       f"a wrong output: {verdict.message} ({case.label})")

    def _time(self, ev: Evaluation, judge: stages.Judge, incumbent: Path | None, checked: bool = True) -> None:
        notes: list[str] = []
        runners = {"candidate": judge}
        if incumbent is not None:
            inc = self._incumbent_judge(incumbent, _new_seed(), notes)
            if inc is not None:
                runners["incumbent"] = inc
        dtype = self.dtypes[0]
        gpu = judge.gpu
        plan = timing.GPU_PLAN if gpu else timing.CPU_PLAN
        self.last_kind = "gpu" if gpu else "interpreter"
        self._incumbent_timed = "incumbent" in runners
        rounds = INTERLEAVED_ROUNDS["gpu" if gpu else "interpreter"] if len(runners) > 1 else 1
        planned = rounds
        most = rounds * (1 + EXTRA_ROUNDS)  # rounds when the planned ones leave the pair undecided
        n_cases = len(self.shapes)
        samples = {s: [[[] for _ in range(most)] for _ in range(n_cases)] for s in runners}
        walls = {s: [[0.0] * most for _ in range(n_cases)] for s in runners}

        def batch(slot: str, c: int, n: int, check_p: float, warm_up: bool = False,
                  numerics_p: float = 0.0, rewrite_p: float = 0.0) -> tuple[list[float], float]:
            try:  # the incumbent gets the same share of numerics draws and rewrites, unchecked
                candidate = slot == "candidate"
                return self._batch(judge, runners[slot], slot, self.shapes[c], dtype, n,
                                   check_p if candidate and checked else 0.0, warm_up, numerics_p, judged=candidate,
                                   rewrite_p=rewrite_p)
            except (stages.Rejection, stages.CaseFailure, WorkerCrash, WorkerTimeout, stages.CudaFault) as exc:
                if slot == "candidate":
                    raise
                raise _IncumbentFailed(str(exc)) from None

        per_round = []
        self._calls_timed = self._calls_uncovered = 0
        try:
            for c in range(n_cases):
                est = 0.0
                for slot in runners:  # warm-up (compiles, autotuning) and estimate: judged calls too
                    warm, _ = batch(slot, c, WARM_CALLS["gpu" if gpu else "interpreter"], 1.0, warm_up=True)
                    est = max(est, min(warm) if gpu else warm[-1])
                per_round.append(max(1, timing.calls_for(plan, est, gpu) // rounds))
            r = -1
            while r + 1 < rounds:
                r += 1
                order = list(runners) if r % 2 == 0 else list(reversed(runners))
                for slot in order:
                    for c in range(n_cases):
                        check_p = min(1.0, CHECKED_PER_SHAPE / (per_round[c] * rounds))
                        # built-in problems only: their numerics draws are seeded like make_inputs (the worker
                        # and the judge draw the same bits); KernelBench's runs the reference Model to choose
                        numerics_p = min(1.0, NUMERICS_PER_SHAPE / (per_round[c] * rounds)) \
                            if self.problem.source == "builtin" else 0.0
                        rewrite_p = min(1.0, REWRITE_RUNS_PER_SHAPE / (per_round[c] * rounds)) \
                            if timed_rewrites() else 0.0
                        times, wall = batch(slot, c, per_round[c], check_p, numerics_p=numerics_p, rewrite_p=rewrite_p)
                        samples[slot][c][r] = times
                        walls[slot][c][r] = wall * 1e6 / max(1, len(times))
                stop = self._why_stop(samples, r + 1, rounds) if self._incumbent_timed and r + 1 < rounds else None
                self._timing_stopped = bool(stop)
                if stop:
                    notes.append(f"timing stopped after {r + 1} of {rounds} interleaved rounds: {stop}")
                    break
                if r + 1 == rounds == planned and self._incumbent_timed and planned > 1 and timing.undecided(
                        self._round_scores(samples, "candidate", rounds), self._round_scores(samples, "incumbent", rounds)):
                    rounds = most
                    notes.append(f"{planned} interleaved rounds left the gain undecided (their spread as large as "
                                 f"it): timed {most - planned} more")
            for table in (samples, walls):  # the rounds not run are not rounds
                for slot in table:
                    table[slot] = [per_case[:r + 1] for per_case in table[slot]]
        except _IncumbentFailed as exc:
            self._drop_incumbent()
            self._time(ev, judge, None, checked)
            ev.message += f"; incumbent not timed: {exc}"
            return
        if self._calls_uncovered:
            notes.append(f"{self._calls_uncovered} of {self._calls_timed} timed calls outlasted the GPU spin that hides "
                         "the judge's host time (counted as measured: dropping them would let a kernel choose "
                         "which of its calls are timed)")
        self._record_timings(ev, judge, samples, walls, runners, notes)

    def _record_timings(self, ev: Evaluation, judge: stages.Judge, samples: dict, walls: dict, runners: dict,
                        notes: list[str]) -> None:
        dtype = self.dtypes[0]
        ev.timing_kind = self.last_kind
        ceil = ceilings(self.device_name) if judge.gpu else None
        timer = self._parent_timer() if self.baselines else None
        for c, (shape, weight) in enumerate(zip(self.shapes, self.weights)):
            flat = [x for round_ in samples["candidate"][c] for x in round_]
            latency = timing.median(flat)
            roof = roofline.roofline(self.problem.bytes(shape, dtype), self.problem.flops(shape), latency, ceil,
                                     dtype_name(dtype))
            st = ShapeTiming(shape=dict(shape), dtype=dtype_name(dtype), latency_us=latency, spread_us=timing.spread(flat),
                             weight=weight, gbps=roof.gbps, tflops=roof.tflops, floor_us=roof.floor_us,
                             pct_roofline=roof.pct_roofline)
            if timer is not None:
                baselines_from = time.perf_counter()
                base = baselines_mod.baseline(self.problem, self.device, self.device_name, shape, dtype,
                                              lambda: self._baseline_sets(judge, shape, dtype, len(runners)), timer)
                st.eager_us, st.compile_us = base.eager_us, base.compile_us
                st.speedup_vs_eager = roofline.speedup(base.eager_us, latency)
                st.speedup_vs_compile = roofline.speedup(base.compile_us, latency)
                if base.note and judge.gpu:
                    notes.append(base.note)
                self._baselines_s += time.perf_counter() - baselines_from
            ev.timings.append(st)
            if judge.gpu and integrity.below_floor(latency, roof.floor_us):
                raise stages.Rejection("below-floor", f"measured {latency:.2f} us at {st.dtype} "
                                       f"{'x'.join(map(str, shape.values()))}, below {integrity.BELOW_FLOOR_FACTOR:g}x the physical floor "
                                       f"{roof.floor_us:.2f} us ({ceil.source} ceilings): a measurement error or a trick")
        ev.score_us = timing.weighted_score([t.latency_us for t in ev.timings], self.weights)
        if all(t.eager_us for t in ev.timings):
            ev.eager_score_us = timing.weighted_score([t.eager_us for t in ev.timings], self.weights)
        if all(t.compile_us for t in ev.timings):
            ev.compile_score_us = timing.weighted_score([t.compile_us for t in ev.timings], self.weights)
        if "incumbent" in runners:
            ev.vs_incumbent = self._comparison(samples, len(self.shapes), walls)
            if ev.vs_incumbent.wall_confirmed is False:
                notes.append("the judge's wall clock did not see the candidate's reported gain: not counted as faster")
        if notes:
            ev.message += "; " + "; ".join(dict.fromkeys(notes))

    def _baseline_sets(self, judge: stages.Judge, shape: Shape, dtype: torch.dtype, workers: int) -> list[tuple]:
        """Input sets for the baselines (drawn only when they are timed, not when cached): up to
        ``TIMING_SETS``, as many as fit beside what the workers still hold."""
        first = judge.make_case(shape, dtype)
        sizes = judge.sizes_of(first)
        held = workers * (judge.history(sizes.outputs) + memory.timing_sets(
            sizes, judge.budget, judge.history(sizes.outputs), workers > 1, judge.gpu, self.spec is None)
            * (sizes.inputs + sizes.outputs))  # each worker keeps its last request's inputs and outputs
        n = memory.baseline_sets(sizes, judge.budget, held, TIMING_SETS)
        if n < 1:
            raise baselines_mod.NoRoom(f"baselines not timed: not enough memory for an input set beside the workers' "
                                       f"{memory.fmt_bytes(held)} ({memory.fmt_bytes(judge.budget)} available)")
        return [first.args] + [judge.make_case(shape, dtype).args for _ in range(n - 1)]

    def _round_scores(self, samples: dict[str, Any], slot: str, done: int) -> list[float]:
        """The weighted score of each of the first ``done`` rounds of ``slot`` (the median per shape)."""
        return [timing.weighted_score([timing.median(per_case[r]) for per_case in samples[slot]], self.weights)
                for r in range(done)]

    def _why_stop(self, samples: dict[str, Any], done: int, rounds: int) -> str | None:
        """Timing a candidate further is of no use once the rounds so far rule out a gain (a
        proof: ``timing.loss_decided``) or show a clear loss (``timing.clear_loss``): it stays a
        pass (every call so far judged), but it cannot be kept.  Why, or None to go on."""
        ratios = timing.round_ratios(self._round_scores(samples, "candidate", done),
                                     self._round_scores(samples, "incumbent", done))
        if timing.loss_decided(ratios, rounds):
            return (f"the candidate was not faster in {timing.rounds_that_decide_a_loss(rounds)} of them, which rules "
                    "out a gain whatever the rest would measure")
        calls = {slot: [[x for r in per_case[:done] for x in r] for per_case in samples[slot]]
                 for slot in ("candidate", "incumbent")}
        if min(len(c) for c in calls["candidate"]) < timing.CLEAR_LOSS_MIN_CALLS:
            return None
        fastest = timing.weighted_score([min(c) for c in calls["candidate"]], self.weights)
        typical = timing.weighted_score([timing.median(c) for c in calls["incumbent"]], self.weights)
        if timing.clear_loss(fastest, typical):
            return (f"the candidate's fastest calls ({fastest:.4g} us, weighted over the shapes) were slower than "
                    f"the incumbent's median ({typical:.4g} us) by more than {timing.CLEAR_LOSS:.0%}")
        return None

    def _comparison(self, samples: dict[str, Any], n_cases: int, walls: dict[str, Any]) -> Any:
        def per_round(slot: str) -> list[float]:
            return self._round_scores(samples, slot, len(samples[slot][0]))

        def total(slot: str) -> float:
            return timing.weighted_score([timing.median([x for r in samples[slot][c] for x in r]) for c in range(n_cases)],
                                         self.weights)

        comparison = timing.compare_rounds(per_round("candidate"), per_round("incumbent"), total("candidate"),
                                           total("incumbent"))
        rounds = len(walls["candidate"][0])
        wall_round = {slot: [timing.weighted_score([walls[slot][c][r] for c in range(n_cases)], self.weights)
                             for r in range(rounds)] for slot in ("candidate", "incumbent")}
        comparison.wall_confirmed = timing.wall_confirms(per_round("candidate"), per_round("incumbent"),
                                                         wall_round["candidate"], wall_round["incumbent"])
        comparison.significant = comparison.significant and comparison.wall_confirmed
        return comparison

    def _parent_timer(self) -> timing.Timer:
        if self._timer is None:
            self._timer = timing.Timer(self.device)
        return self._timer


def evaluate(problem_spec: Any, kernel_file: str | Path, *, device: str = "auto", shapes: Sequence[Any] | None = None,
             dtypes: Sequence[Any] | None = None, timeout_s: float = 60.0, timing: bool = True, baselines: bool = True,
             weights: Sequence[float] | None = None) -> Evaluation:
    """Judge one kernel file in a fresh worker (see the module docstring)."""
    with Evaluator(problem_spec, device=device, shapes=shapes, dtypes=dtypes, timeout_s=timeout_s, timing=timing,
                   baselines=baselines, weights=weights, prestart=False) as evaluator:
        return evaluator.evaluate(kernel_file)


__all__ = ["Evaluator", "evaluate", "versions", "resolve_device"]
