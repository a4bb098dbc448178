"""The executor on a Ray cluster (``--ray ADDRESS`` or ``--ray local``): one actor per lane,
each holding one GPU (``num_gpus=1``; Ray sets its ``CUDA_VISIBLE_DEVICES``) or one CPU.

Only evaluations leave the driver: an ``EvalJob`` (kernel sources and evaluator settings) goes
to an actor, the Evaluation comes back as JSON.  The workspace, git and the agents stay here.
An actor that dies (its node lost, killed for memory) costs its job one retry on a fresh
actor, which Ray places wherever there is room; when that dies too, the job is a ``crash``
that gives Ray's reason.  Ray is the ``dist`` extra; this module is imported only for ``--ray``.
"""
from __future__ import annotations

import pickle
import queue
import threading
import time
from typing import Any, Callable

from .executor import RETRIES_AFTER_LANE_DEATH, EvalJob, LaneHost, Lanes, Outcome, crash_evaluation
from .targets import OptimizeError


class _EvaluatorActor:
    def __init__(self, factory_bytes: bytes):
        self.host = LaneHost(pickle.loads(factory_bytes))

    def evaluate(self, job: dict) -> str:
        return self.host.evaluate(job)

    def close(self) -> None:
        self.host.close()


def require_ray() -> None:
    """OptimizeError (exit 2, before anything is written) when Ray is not installed."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise OptimizeError("--ray needs Ray: pip install 'autokernel[dist]'")


def connect(address: str, num_cpus: int | None = None):
    """``ray.init`` on ``address`` (``local``: a new local instance).  OptimizeError when Ray
    is not installed or the cluster cannot be reached."""
    try:
        import ray
    except ImportError:
        raise OptimizeError("--ray needs Ray: pip install 'autokernel[dist]'") from None
    if ray.is_initialized():
        return ray
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "ignore_reinit_error": True,
                              "configure_logging": False}
    try:
        if address == "local":
            ray.init(num_cpus=num_cpus, **kwargs)
        else:
            ray.init(address=address, **kwargs)
    except Exception as exc:
        raise OptimizeError(f"--ray {address}: could not connect: {type(exc).__name__}: {exc}") from None
    return ray


class RayExecutor:
    def __init__(self, lanes: Lanes, factory: Callable[..., Any]):
        gpu = lanes.device.startswith("cuda")
        self.ray = connect(lanes.ray, num_cpus=(lanes.parallel or 2) if lanes.ray == "local" and not gpu else None)
        self.started_ray = lanes.ray == "local"
        count = lanes.parallel
        if count is None:
            resources = self.ray.cluster_resources()
            count = max(int(resources.get("GPU" if gpu else "CPU", 1)), 1)
        options = {"num_gpus": 1, "num_cpus": 0} if gpu else {"num_cpus": 1}
        self._actor_class = self.ray.remote(max_restarts=0, **options)(_EvaluatorActor)
        self._factory_bytes = pickle.dumps(factory)
        self.names = [f"ray{i}" for i in range(count)]
        self._actors = [self._actor_class.remote(self._factory_bytes) for _ in range(count)]
        self._free: queue.Queue[int] = queue.Queue()
        for i in range(count):
            self._free.put(i)
        self._lock = threading.Lock()
        self._closed = False

    def evaluate(self, job: EvalJob, on_lane: Callable[[int], None] | None = None) -> Outcome:
        from ..harness.records import Evaluation

        lane = self._free.get()
        t0 = time.monotonic()
        try:
            if on_lane is not None:
                on_lane(lane)
            deaths: list[str] = []
            while True:
                with self._lock:
                    actor = self._actors[lane]
                try:
                    text = self.ray.get(actor.evaluate.remote(job.to_dict()))
                    return Outcome(Evaluation.from_json(text), lane, time.monotonic() - t0)
                except (self.ray.exceptions.RayActorError, self.ray.exceptions.WorkerCrashedError,
                        self.ray.exceptions.ObjectLostError) as exc:
                    deaths.append(_first_line(exc))
                    with self._lock:
                        if not self._closed:
                            self._actors[lane] = self._actor_class.remote(self._factory_bytes)
                    if self._closed or len(deaths) > RETRIES_AFTER_LANE_DEATH:
                        return Outcome(crash_evaluation(job, f"the Ray worker of {self.names[lane]} died: "
                                                             + "; ".join(deaths)), lane, time.monotonic() - t0)
                except self.ray.exceptions.RayTaskError as exc:
                    return Outcome(crash_evaluation(job, f"the evaluation failed on Ray: {_first_line(exc)}"),
                                   lane, time.monotonic() - t0)
        finally:
            self._free.put(lane)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            actors, self._actors = self._actors, []
        for actor in actors:
            try:
                self.ray.get(actor.close.remote(), timeout=10)
            except Exception:
                pass
            try:
                self.ray.kill(actor)
            except Exception:
                pass
        if self.started_ray:
            self.ray.shutdown()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
