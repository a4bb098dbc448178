"""The tuner's screen: a cheap, timing-only ranking of many kernel configurations.

``run_screen(job) -> ScreenReport``.  Not the judge: it only decides which configurations are
worth a full evaluation, and its numbers are never reported as results.  Each configuration's
kernel file (the incumbent with other ``KNOBS`` values) runs in a process of its own (spawn
context; ``TRITON_INTERPRET=1`` on the CPU), because kernel code can hang or crash:

* the problem is loaded, and one set of fresh inputs is drawn per target shape (in the
  timing dtype) with the reference computed once on upcast copies;
* rung 0: each configuration is called once per shape and its outputs checked against the
  reference (the problem's tolerance), then timed briefly — on a GPU with
  ``triton.testing.do_bench`` (median, L2 flushed before every call), on the CPU with the
  median of a few wall-clock calls.  Its score is the weighted sum over the shapes, divided by
  the incumbent's score timed in the same process just before (the incumbent is re-timed
  after every few configurations, so drift hits both);
* successive halving: the best third (``search.survivors``) is timed again with twice the
  repetitions, until at most ``search.FINALISTS`` are left or time is up.

The process streams one message per result, so a configuration that hangs (no answer within
``config_timeout_s``) or kills the process is recorded as ``timeout``/``crash`` and a new
process carries on with the rest.  The whole screen ends by ``time_limit_s`` (rung 0 stops
taking new configurations at ``RUNG0_SHARE`` of it, to leave time for the halving).
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from ..hardware import ramp_gpu_clocks
from . import search

RUNG0_SHARE = 0.7  # of the time limit, rung 0 may use; the halving rungs get the rest
INCUMBENT_EVERY = 8  # re-time the incumbent after this many configurations
STARTUP_TIMEOUT_S = 240.0
GPU_WARMUP_MS = 5.0
# An idle H200 sits at ~345 MHz and takes a few hundred ms of load to reach full clocks: the first
# configurations a fresh screen process timed (the incumbent first of all) came out up to 15% slow
# (2026-12-01: the rotary default ranked 159th of 375 in a sweep, 2% from the best when re-timed).
GPU_RAMP_MS = 400.0
CPU_CALLS = 2  # rung r uses CPU_CALLS * 2**r wall-clock calls
INCUMBENT = "incumbent"

STATUSES = ("ok", "incorrect", "error", "crash", "timeout")
FAILED = ("error", "crash", "timeout")  # prune what dominates these


@dataclass
class ScreenJob:
    problem_spec: str
    device: str
    incumbent_source: str
    candidates: list[tuple[str, str]]  # (key, kernel source), in the order to screen them
    shapes: list[dict[str, int]] | None = None  # None: the problem's shapes for the device
    dtype: str | None = None  # None: the problem's first dtype (the one the judge times)
    weights: list[float] | None = None
    seed: int = 0  # for the fresh inputs
    time_limit_s: float = 60.0
    config_timeout_s: float = 30.0
    rep_ms: float = 10.0  # GPU: do_bench's timing window per shape at rung 0 (doubled each rung)
    halving: bool = True  # False: rung 0 only, every configuration timed alike (a plain sweep)


@dataclass
class ScreenResult:
    status: str  # one of STATUSES
    ratio: float | None = None  # score / the incumbent's score (None when not both timed)
    score_us: float | None = None
    rung: int = 0  # the last halving rung it was timed in
    message: str = ""


@dataclass
class ScreenReport:
    results: dict[str, ScreenResult] = field(default_factory=dict)  # key -> result (screened ones only)
    finalists: list[str] = field(default_factory=list)  # best first
    wall_s: float = 0.0
    startup_s: float = 0.0
    incumbent: ScreenResult | None = None  # the incumbent as the screen saw it (ratio 1.0 when timed)
    error: str = ""  # why the screen could not run (the problem did not load, no process...)

    @property
    def per_config_s(self) -> float | None:
        n = len(self.results)
        return (self.wall_s - self.startup_s) / n if n else None


# ====================================================================== parent side
def run_screen(job: ScreenJob) -> ScreenReport:
    t0 = time.monotonic()
    deadline = t0 + job.time_limit_s
    report = ScreenReport()
    pending = list(job.candidates)
    carry: list[tuple[str, str]] = []  # rung-0 leaders of a process that died, re-timed by the next
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 1.0:
            break
        todo = carry + [c for c in pending if c[0] not in report.results]
        if not todo:
            break
        outcome = _one_process(job, todo, remaining, report)
        if outcome is None:  # finished normally
            break
        if outcome == "startup":
            break
        # a configuration crashed or hung: drop what it finished, keep its leaders for the halving
        pending = [c for c in pending if c[0] not in report.results]
        ok = {k: r.ratio for k, r in report.results.items() if r.status == "ok" and r.ratio is not None}
        lead = set(search.survivors(ok)) if ok else set()
        sources = dict(job.candidates)
        carry = [(k, sources[k]) for k in lead]
    report.wall_s = time.monotonic() - t0
    report.finalists = rank(report.results)[:search.FINALISTS]
    return report


def rank(results: dict[str, ScreenResult]) -> list[str]:
    """Keys of the configurations that screened correct, best first: those that got furthest
    in the halving first, then by their last time relative to the incumbent."""
    ok = {k: r for k, r in results.items() if r.status == "ok"}
    return sorted(ok, key=lambda k: (-ok[k].rung, ok[k].ratio if ok[k].ratio is not None else ok[k].score_us, k))


def _one_process(job: ScreenJob, todo: list[tuple[str, str]], limit_s: float, report: ScreenReport) -> str | None:
    """Screen ``todo`` in one process; results go into ``report``.  Returns None when the
    process finished, "startup" when it never became ready, "died" after a crash/timeout."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    payload = {"spec": job.problem_spec, "device": job.device, "incumbent": job.incumbent_source,
               "todo": todo, "shapes": job.shapes, "dtype": job.dtype, "weights": job.weights, "seed": job.seed,
               "start": time.time(), "limit_s": limit_s, "rep_ms": job.rep_ms, "halving": job.halving}
    proc = ctx.Process(target=_child_main, args=(child, payload), daemon=True, name="autokernel-screen")
    t_start = time.monotonic()
    with _child_environment(job.device):
        proc.start()
    child.close()
    current: str | None = None
    ready = False
    hard_deadline = t_start + limit_s + 5.0
    try:
        while True:
            now = time.monotonic()
            if ready:
                wait = min(job.config_timeout_s, hard_deadline - now)
            else:
                wait = min(STARTUP_TIMEOUT_S, hard_deadline - now)
            if wait <= 0 or not parent.poll(wait):
                if not ready:
                    if time.monotonic() - t_start >= STARTUP_TIMEOUT_S:  # else: merely out of time
                        report.error = report.error or "the screen process did not start in time"
                    return "startup"
                if current is not None and time.monotonic() < hard_deadline:
                    report.results[current] = ScreenResult("timeout", message=f"no answer in {job.config_timeout_s:g} s")
                    return "died"
                return None  # out of time: what was screened stands
            try:
                message = parent.recv()
            except (EOFError, OSError):
                proc.join(5)
                if not ready:
                    report.error = report.error or f"the screen process died at startup (exit code {proc.exitcode})"
                    return "startup"
                if current is not None:
                    report.results[current] = ScreenResult("crash", message=f"screen process died (exit code {proc.exitcode})")
                    return "died"
                return None
            kind = message[0]
            if kind == "ready":
                ready = True
                report.startup_s += time.monotonic() - t_start
            elif kind == "start":
                current = message[1]
            elif kind == "result":
                _, key, status, ratio, score, rung, text = message
                result = ScreenResult(status, ratio, score, rung, text)
                if key == INCUMBENT:
                    report.incumbent = result
                else:
                    report.results[key] = result
                current = None
            elif kind == "fatal":
                report.error = message[1]
                return None
            elif kind == "done":
                return None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()


@contextlib.contextmanager
def _child_environment(device: str):
    """The interpreter on the CPU, compiled Triton on a GPU; and the caller's ``__main__``
    hidden so that spawn does not re-run a script without a main guard."""
    saved = os.environ.get("TRITON_INTERPRET")
    main = sys.modules.get("__main__")
    hidden = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        if device.startswith("cuda"):
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = "1"
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(hidden)


# ====================================================================== child side
def _child_main(conn, payload: dict[str, Any]) -> None:
    os.dup2(2, 1)  # a kernel that prints must not write into the caller's stdout
    try:
        bench = _Bench(payload)
    except Exception as exc:  # the problem does not load: nothing can be screened
        conn.send(("fatal", f"screen setup failed: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready",))
    start, limit = payload["start"], payload["limit_s"]
    try:
        rung0_share = RUNG0_SHARE if payload["halving"] else 1.0
        bench.run(conn, start + rung0_share * limit, start + limit, payload["halving"])
        conn.send(("done",))
    except (BrokenPipeError, EOFError):
        return
    finally:
        shutil.rmtree(bench.source_dir, ignore_errors=True)


def configuration_file(folder: str, index: int, source: str) -> str:
    """Write one configuration's source to a real file and return its path: compiled Triton
    (on a GPU) reads a ``@triton.jit`` function's source from its file, so a module compiled
    from a string with a made-up file name cannot define kernels there."""
    path = os.path.join(folder, f"config_{index}.py")
    with open(path, "w") as f:
        f.write(source)
    return path


class _Bench:
    def __init__(self, payload: dict[str, Any]):
        import torch

        from ..problems import get_problem
        from ..problems.base import parse_dtype

        self.torch = torch
        self.device = payload["device"]
        self.gpu = self.device.startswith("cuda")
        self.problem = get_problem(payload["spec"])
        self.dtype = parse_dtype(payload["dtype"]) if payload["dtype"] else self.problem.dtypes[0]
        shapes = payload["shapes"] or [dict(s) for s in self.problem.shapes_for(self.device)]
        self.weights = payload["weights"] or [1.0] * len(shapes)
        self.todo = payload["todo"]
        self.rep_ms = payload["rep_ms"]
        self.incumbent_source = payload["incumbent"]
        self.cases = []
        for i, shape in enumerate(shapes):
            args = self.problem.make_inputs(shape, self.dtype, self.device, payload["seed"] * 1009 + i)
            self.cases.append((shape, args) + self._expected(args))
        self.modules: dict[str, Any] = {}
        self.source_dir = tempfile.mkdtemp(prefix="autokernel-screen-")
        self.sources = dict(self.todo)
        self.sources[INCUMBENT] = self.incumbent_source

    def _expected(self, args: tuple) -> tuple:
        from ..harness.compare import output_meta

        wide = self.torch.float32 if self.gpu else self.torch.float64
        up = tuple(a.detach().to(wide) if isinstance(a, self.torch.Tensor) and a.is_floating_point() else a
                   for a in args)
        return output_meta(self.problem.reference(*args)), self.problem.reference(*up)

    # ---------------------------------------------------------------- one configuration
    def _callables(self, key: str) -> list:
        import types

        if key not in self.modules:
            module = types.ModuleType(f"autokernel_screen_{len(self.modules)}")
            path = configuration_file(self.source_dir, len(self.modules), self.sources[key])
            module.__file__ = path
            exec(compile(self.sources[key], path, "exec"), module.__dict__)
            self.modules[key] = module
        module = self.modules[key]
        return [self.problem.kernel_callable(module, shape, self.dtype, self.device) for shape, *_ in self.cases]

    def check(self, key: str) -> tuple[str, str]:
        from ..harness.compare import compare_outputs

        try:
            fns = self._callables(key)
            for fn, (shape, args, meta, expected) in zip(fns, self.cases):
                verdict = compare_outputs(fn(*args), expected, meta, self.problem.tolerance(self.dtype))
                if not verdict.ok:
                    return "incorrect", f"at {shape}: {verdict.message}"
        except Exception as exc:
            return "error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        return "ok", ""

    def score(self, key: str, rung: int) -> float:
        fns = self._callables(key)
        total = 0.0
        for fn, weight, (shape, args, *_rest) in zip(fns, self.weights, self.cases):
            total += weight * self._time(lambda: fn(*args), rung)
        return total

    def _time(self, call, rung: int) -> float:
        if self.gpu:
            from triton.testing import do_bench

            return 1000.0 * do_bench(call, warmup=GPU_WARMUP_MS, rep=self.rep_ms * 2 ** rung,
                                     return_mode="median")
        samples = []
        for _ in range(CPU_CALLS * 2 ** rung):
            start = time.perf_counter()
            call()
            samples.append((time.perf_counter() - start) * 1e6)
        return statistics.median(samples)

    def ramp_clocks(self) -> None:
        """Keep the GPU busy for GPU_RAMP_MS so that timing starts at full clocks."""
        if self.gpu:
            ramp_gpu_clocks(self.device, GPU_RAMP_MS / 1000.0)

    def exit_if_device_broken(self) -> None:
        """After an error on a GPU: when the CUDA context is gone, every later configuration
        would fail too, so end this process (the parent starts a fresh one)."""
        if not self.gpu:
            return
        try:
            self.torch.cuda.synchronize()
        except Exception:
            os._exit(3)

    def _timed(self, conn, key: str, rung: int, incumbent_us: float | None) -> float | None:
        """Time ``key`` at ``rung`` and send its result; its ranking value (ratio to the
        incumbent, or its score when the incumbent has none), or None when it failed."""
        try:
            score = self.score(key, rung)
        except Exception as exc:
            conn.send(("result", key, "error", None, None, rung, f"{type(exc).__name__}: {exc}"[:300]))
            self.exit_if_device_broken()
            return None
        ratio = score / incumbent_us if incumbent_us else None
        conn.send(("result", key, "ok", ratio, score, rung, ""))
        return ratio if ratio is not None else score

    # ---------------------------------------------------------------- the rungs
    def run(self, conn, rung0_until: float, until: float, halving: bool = True) -> None:
        """Rung 0 over every configuration until ``rung0_until``, then (with ``halving``)
        halving rungs until ``until`` (wall-clock times)."""
        status, text = self.check(INCUMBENT)
        self.ramp_clocks()
        incumbent_us = self.score(INCUMBENT, 0) if status == "ok" else None
        conn.send(("result", INCUMBENT, status, 1.0 if incumbent_us else None, incumbent_us, 0, text))
        ranking: dict[str, float] = {}
        for i, (key, _) in enumerate(self.todo):
            if time.time() >= rung0_until:
                break
            if i and i % INCUMBENT_EVERY == 0 and incumbent_us is not None:
                incumbent_us = self.score(INCUMBENT, 0)
            conn.send(("start", key))
            status, text = self.check(key)
            if status != "ok":
                conn.send(("result", key, status, None, None, 0, text))
                if status == "error":
                    self.exit_if_device_broken()
                continue
            value = self._timed(conn, key, 0, incumbent_us)
            if value is not None:
                ranking[key] = value
        rung = 0
        alive = list(ranking)
        while halving and len(alive) > search.FINALISTS and time.time() < until:
            alive = search.survivors({k: ranking[k] for k in alive})
            rung += 1
            if incumbent_us is not None:
                incumbent_us = self.score(INCUMBENT, rung)
            timed = []
            for i, key in enumerate(alive):
                if time.time() >= until:
                    return
                if i and i % INCUMBENT_EVERY == 0 and incumbent_us is not None:
                    incumbent_us = self.score(INCUMBENT, rung)
                conn.send(("start", key))
                value = self._timed(conn, key, rung, incumbent_us)
                if value is not None:
                    ranking[key] = value
                    timed.append(key)
            alive = timed
