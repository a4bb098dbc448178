"""Where evaluations run when several are in flight: the executor interface and its local
implementation.

An executor has *lanes*, one evaluation at a time each.  On a GPU machine a lane is one GPU:
a process started with ``CUDA_VISIBLE_DEVICES`` set to that GPU owns the ``Evaluator``s (and
so their worker processes), so two timings never share a GPU.  On CPU a lane is one such
process, unpinned.  ``evaluate(job)`` blocks until a lane is free, runs the job there and
returns the ``Evaluation``; the loop calls it from several threads.  Jobs and results cross
as data: the kernel sources go in (``EvalJob``), the Evaluation comes back as JSON, so the
same jobs run on Ray actors (``loop/ray_executor.py``, imported only for ``--ray``).

A lane process that dies (killed, out of memory) costs its job one retry on a fresh process;
when that dies too, the job's Evaluation is a ``crash`` that says so.  Crashes of the kernel
itself are the Evaluator's business (its own worker processes) and come back as verdicts.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol

from .targets import OptimizeError

RETRIES_AFTER_LANE_DEATH = 1


@dataclass(frozen=True)
class Lanes:
    """How a run spreads: ``parallel`` experiments in flight (None: one per lane, known once
    a Ray cluster is reached), evaluations on ``names`` (one per GPU or CPU process)."""

    parallel: int | None
    names: list[str] = field(default_factory=list)
    gpus: list[int] | None = None  # CUDA index per lane (None on CPU)
    ray: str | None = None  # Ray address or "local"
    device: str = "cpu"  # the device an evaluator in a lane is given

    @property
    def spread(self) -> bool:
        """Whether the scheduler of loop/parallel.py runs (else the serial loop, in-process)."""
        return self.ray is not None or (self.parallel or 1) > 1 or self.gpus is not None


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plan_lanes(device: str, parallel: int | None, gpus: list[int] | None, ray: str | None,
               gpu_count: int | None = None) -> Lanes:
    """The lanes for ``device`` (already resolved): on CPU ``parallel`` processes (default 1);
    on CUDA one lane per GPU of ``gpus`` (default every visible GPU), at most ``parallel`` of
    them; with ``ray`` the cluster decides where lanes run.  Raises OptimizeError for a bad
    combination (before anything is written)."""
    if parallel is not None and parallel < 1:
        raise OptimizeError("--parallel must be at least 1")
    if gpus is not None:
        if not gpus:
            raise OptimizeError("--gpus needs at least one GPU index, e.g. --gpus 0,2")
        if len(set(gpus)) != len(gpus) or min(gpus) < 0:
            raise OptimizeError(f"--gpus {','.join(map(str, gpus))}: give distinct non-negative indices")
        if ray is not None:
            raise OptimizeError("--gpus picks GPUs of this machine; with --ray the cluster places the evaluators")
        if not device.startswith("cuda"):
            raise OptimizeError("--gpus needs a CUDA device (--device cuda)")
    if ray is not None:
        n = parallel
        return Lanes(parallel=n, names=[f"ray{i}" for i in range(n)] if n else [], ray=ray,
                     device="cuda" if device.startswith("cuda") else "cpu")
    if not device.startswith("cuda"):
        n = parallel or 1
        return Lanes(parallel=n, names=[f"cpu{i}" for i in range(n)] if n > 1 else ["cpu"], device="cpu")
    count = visible_gpus() if gpu_count is None else gpu_count
    if gpus is None:
        if ":" in device:  # --device cuda:N alone: that GPU
            gpus = [int(device.split(":", 1)[1])]
            if parallel is None or parallel == 1:
                return Lanes(parallel=1, names=[f"gpu{gpus[0]}"], device=device)
        else:
            gpus = list(range(max(count, 1)))
            if (parallel or len(gpus)) == 1:
                return Lanes(parallel=1, names=["gpu0"], device=device)  # one at a time: the serial loop
    missing = [g for g in gpus if g >= count]
    if missing:
        raise OptimizeError(f"--gpus {','.join(map(str, gpus))}: this machine shows {count} GPU(s) "
                            f"(indices 0..{count - 1})")
    n = parallel or len(gpus)
    gpus = gpus[:n]
    return Lanes(parallel=n, names=[f"gpu{g}" for g in gpus], gpus=list(gpus), device="cuda")


def pin(index: int, visible: str | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value for this process's GPU ``index``: when this process
    already sees a subset (``CUDA_VISIBLE_DEVICES=2,3``), index 0 is the first of those."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is None or not visible.strip():
        return str(index)
    listed = [v.strip() for v in visible.split(",") if v.strip()]
    return listed[index] if index < len(listed) else str(index)


@dataclass(frozen=True)
class EvalJob:
    """One evaluation as data: the candidate (and incumbent) source and the evaluator settings."""

    spec: str
    kernel_source: str
    incumbent_source: str | None
    evaluator: dict  # keyword arguments of the Evaluator (device, shapes, dtypes, timeout_s, weights)
    label: str = "kernel"

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def evaluator_key(self) -> str:
        """Jobs with the same key are judged by the same Evaluator in a lane."""
        return evaluator_key(self.spec, self.evaluator)


def evaluator_key(spec: str, settings: dict) -> str:
    return json.dumps([spec, settings], sort_keys=True)


@dataclass
class Outcome:
    evaluation: Any  # harness.records.Evaluation
    lane: int
    seconds: float  # wall time the lane spent on the job


class Executor(Protocol):
    names: list[str]

    def evaluate(self, job: EvalJob, on_lane: Callable[[int], None] | None = None) -> Outcome: ...

    def close(self) -> None: ...


def crash_evaluation(job: EvalJob, message: str):
    from ..harness.records import Evaluation

    return Evaluation(problem=job.spec, kernel_file=job.label, correct=False, verdict="crash", message=message,
                      device=job.evaluator.get("device", "cpu"))


# --------------------------------------------------------------------------- what runs in a lane
class LaneHost:
    """Owns one Evaluator per problem setting and judges jobs given as dicts.  Runs inside a
    lane process (or a Ray actor); sources are written to a private directory."""

    def __init__(self, factory: Callable[..., Any]):
        self.factory = factory
        self.evaluators: dict[str, Any] = {}
        self.dir = tempfile.mkdtemp(prefix="autokernel-lane-")
        self.count = 0

    def evaluate(self, job: dict) -> str:
        """The Evaluation of ``job`` as JSON (a crash Evaluation when the evaluator raised)."""
        from ..harness.records import Evaluation

        self.count += 1
        stem = os.path.join(self.dir, f"{self.count:05d}")
        os.makedirs(stem)
        kernel = os.path.join(stem, "kernel.py")
        with open(kernel, "w") as fh:
            fh.write(job["kernel_source"])
        incumbent = None
        if job.get("incumbent_source") is not None:
            incumbent = os.path.join(stem, "incumbent.py")
            with open(incumbent, "w") as fh:
                fh.write(job["incumbent_source"])
        key = evaluator_key(job["spec"], job["evaluator"])
        try:
            if key not in self.evaluators:
                self.evaluators[key] = self.factory(job["spec"], **job["evaluator"])
            evaluation = self.evaluators[key].evaluate(kernel, incumbent_file=incumbent)
        except Exception as exc:
            evaluation = Evaluation(problem=job["spec"], kernel_file=kernel, correct=False, verdict="crash",
                                    message=f"the evaluator failed: {type(exc).__name__}: {exc}",
                                    device=job["evaluator"].get("device", "cpu"))
        finally:
            shutil.rmtree(stem, ignore_errors=True)
        return evaluation.to_json()

    def close(self) -> None:
        for evaluator in self.evaluators.values():
            try:
                evaluator.close()
            except Exception:
                pass
        self.evaluators.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def _lane_main(conn, env: dict[str, str], factory_bytes: bytes) -> None:
    """A lane process: pin the GPU first (before anything can initialise CUDA), then serve jobs
    until the pipe closes (the driver ended, even by kill -9)."""
    os.environ.update(env)
    host = LaneHost(pickle.loads(factory_bytes))
    try:
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError, KeyboardInterrupt):
                break
            if job is None:
                break
            try:
                conn.send(("ok", host.evaluate(job)))
            except Exception:
                conn.send(("error", traceback.format_exc(limit=5)))
    finally:
        host.close()


class _LaneProcess:
    def __init__(self, env: dict[str, str], factory_bytes: bytes):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        # not a daemon: the Evaluator in it starts worker processes of its own
        self.proc = ctx.Process(target=_lane_main, args=(child, env, factory_bytes), name="autokernel-lane")
        self.proc.start()
        child.close()

    def run(self, job: dict) -> tuple[str, str]:
        """("ok", evaluation JSON) or ("error", text); raises EOFError when the process died."""
        self.conn.send(job)
        while not self.conn.poll(0.5):
            if not self.proc.is_alive():
                raise EOFError(f"lane process exited with status {self.proc.exitcode}")
        return self.conn.recv()

    def ask_to_stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass

    def close(self, timeout: float = 10.0) -> None:
        self.ask_to_stop()
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        self.conn.close()


class LocalExecutor:
    """One process per lane on this machine (pinned to its GPU on CUDA)."""

    def __init__(self, lanes: Lanes, factory: Callable[..., Any]):
        self.names = list(lanes.names)
        self.gpus = lanes.gpus
        self._factory_bytes = pickle.dumps(factory)
        self._procs: list[_LaneProcess | None] = [None] * len(self.names)
        self._free = set(range(len(self.names)))
        self._warm: list[set[str]] = [set() for _ in self.names]  # the evaluators each lane holds
        self._turn = threading.Condition()
        self._lock = threading.Lock()
        self._closed = False
        for lane in range(len(self.names)):  # start them all now: their start-up overlaps the first proposals
            self._process(lane)

    def _env(self, lane: int) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": pin(self.gpus[lane])} if self.gpus is not None else {}

    def _process(self, lane: int) -> _LaneProcess:
        with self._lock:
            if self._closed:
                raise RuntimeError("the executor is closed")
            if self._procs[lane] is None:
                self._procs[lane] = _LaneProcess(self._env(lane), self._factory_bytes)
            return self._procs[lane]

    def _drop(self, lane: int) -> None:
        with self._lock:
            proc, self._procs[lane] = self._procs[lane], None
        self._warm[lane] = set()
        if proc is not None:
            proc.close(timeout=1.0)

    def _acquire(self, key: str) -> int:
        """A free lane, preferring one that already holds the job's evaluator (its worker
        process is started and its kernels compiled), else the one holding the fewest."""
        with self._turn:
            while not self._free:
                self._turn.wait()
            warm = sorted(i for i in self._free if key in self._warm[i])
            lane = warm[0] if warm else min(self._free, key=lambda i: (len(self._warm[i]), i))
            self._free.discard(lane)
            self._warm[lane].add(key)
            return lane

    def _release(self, lane: int) -> None:
        with self._turn:
            self._free.add(lane)
            self._turn.notify()

    def evaluate(self, job: EvalJob, on_lane: Callable[[int], None] | None = None) -> Outcome:
        lane = self._acquire(job.evaluator_key)
        t0 = time.monotonic()
        try:
            if on_lane is not None:
                on_lane(lane)
            data, deaths = job.to_dict(), []
            while True:
                try:
                    kind, text = self._process(lane).run(data)
                    break
                except (EOFError, OSError, BrokenPipeError) as exc:
                    self._drop(lane)
                    deaths.append(str(exc) or type(exc).__name__)
                    if self._closed or len(deaths) > RETRIES_AFTER_LANE_DEATH:
                        message = f"the evaluation process on {self.names[lane]} died: {'; '.join(deaths)}"
                        return Outcome(crash_evaluation(job, message), lane, time.monotonic() - t0)
            if kind != "ok":
                return Outcome(crash_evaluation(job, f"the evaluation failed: {text.strip().splitlines()[-1]}"),
                               lane, time.monotonic() - t0)
            from ..harness.records import Evaluation

            return Outcome(Evaluation.from_json(text), lane, time.monotonic() - t0)
        finally:
            self._release(lane)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            procs, self._procs = self._procs, [None] * len(self._procs)
        live = [proc for proc in procs if proc is not None]
        for proc in live:  # all at once: a lane busy with a long evaluation is not waited for in turn
            proc.ask_to_stop()
        deadline = time.monotonic() + 10.0
        for proc in live:
            proc.close(timeout=max(deadline - time.monotonic(), 0.1))


def make_executor(lanes: Lanes, factory: Callable[..., Any]) -> Executor:
    if lanes.ray is not None:
        from .ray_executor import RayExecutor

        return RayExecutor(lanes, factory)
    return LocalExecutor(lanes, factory)
