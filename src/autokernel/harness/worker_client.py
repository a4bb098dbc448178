"""Parent side of the worker process: ``Worker`` (one process, a pipe, deadlines) and the
fresh-worker supply (``acquire``, ``prestart``, ``release``).  See worker.py for the protocol."""
from __future__ import annotations

import atexit
import contextlib
import gc
import os
import secrets
import sys
import time
from typing import Any

from . import transport
from .integrity import fingerprint_digest
from .worker_errors import WorkerCrash, WorkerTimeout
from .worker_main import main

STARTUP_TIMEOUT_S = 240.0


@contextlib.contextmanager
def _main_module_hidden():
    """The worker needs nothing from the caller's ``__main__``; hide it while the process
    starts so that ``spawn`` does not re-run a script that calls ``evaluate`` without an
    ``if __name__ == "__main__"`` guard."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


@contextlib.contextmanager
def _ctrl_c_deferred():
    """SIGINT blocked in this thread while a worker starts: the processes started here (the
    forkserver, on the first start) inherit the mask, so a Ctrl-C to the whole process group
    while the forkserver imports torch (it ignores SIGINT only afterwards) no longer kills it
    with a traceback, and this process gets the interrupt once the start returns.  The
    resource tracker starts first: its start unblocks SIGINT (CPython's bpo-33613 fix)."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)


class Worker:
    """Parent-side handle of one worker process."""

    def __init__(self, device: str):
        self.device = device
        self.proc = None
        self.conn = None
        self.info: dict[str, Any] = {}
        self.baseline: dict[str, str] = {}  # fingerprint taken before any kernel was loaded
        self.baseline_digest = ""
        self.used = False
        self.requests = 0  # round trips answered or attempted (benchmarks and tests count them)
        # time.monotonic() past which no answer is waited for, whatever a request's timeout (the
        # run's budget's end: an evaluation sends dozens of requests, each allowed its timeout)
        self.deadline: float | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self) -> dict[str, Any]:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Spawn the process without waiting for it to be ready (it imports torch meanwhile)."""
        ctx = _context()
        parent_conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=main, args=(child_conn, self.device),
                                daemon=True, name="autokernel-worker")
        saved = os.environ.get("TRITON_INTERPRET")
        try:
            if self.device.startswith("cuda"):
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = "1"
            with _main_module_hidden(), _ctrl_c_deferred():
                self.proc.start()
        finally:
            if saved is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = saved
        child_conn.close()
        self.conn = parent_conn

    def wait_ready(self) -> dict[str, Any]:
        if self.info:
            return self.info
        try:
            info = self._wait(time.monotonic() + STARTUP_TIMEOUT_S)
        except (WorkerCrash, WorkerTimeout) as exc:
            raise RuntimeError(f"worker failed to start: {exc}") from None
        if "error" in info:
            self.kill()
            raise RuntimeError(f"worker failed to start: {info['error']}")
        self.baseline = dict(info.pop("fingerprint", {}))
        self.baseline_digest = fingerprint_digest(self.baseline)
        self.info = info
        return info

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send a request; the answer (plain data) with ``tampered`` computed here, from the
        worker's current fingerprint against the baseline this process keeps."""
        if not self.alive:
            raise WorkerCrash(self.proc.exitcode if self.proc else None)
        self.used = True
        self.requests += 1
        # a fresh secret per request, which the worker echoes from a local of its request loop:
        # the kernel runs in the worker and can write framed answers on its socket, but cannot
        # know the secret (tests/attacks/reduce_forged_reply.py)
        nonce = secrets.token_hex(16)
        try:
            self.conn.send(dict(message, nonce=nonce))
        except (BrokenPipeError, EOFError, OSError):
            self._reap()
            raise WorkerCrash(self.proc.exitcode) from None
        until = time.monotonic() + timeout_s
        reply = self._wait(until if self.deadline is None else min(until, self.deadline))
        now = reply.pop("fingerprint", None)
        digest = reply.pop("fingerprint_digest", None)
        tampered = list(reply.get("tampered") or [])
        if reply.pop("nonce", None) != nonce:
            tampered.append("the worker's answer channel (an answer that is not the worker's answer to this request: "
                            "written by the kernel on the worker's socket, or one request behind)")
        if message.get("op") == "collect" or (digest == self.baseline_digest and now is None):
            pass
        elif not isinstance(now, dict):
            tampered.append("the worker's fingerprint (changed, names missing from its answer)")
        else:
            changed = [name for name, value in self.baseline.items() if now.get(name) != value]
            tampered += changed[:5] + ([f"... and {len(changed) - 5} more"] if len(changed) > 5 else [])
        reply["tampered"] = tampered
        return reply

    def _recv(self) -> dict[str, Any]:
        data = self.conn.recv_bytes()
        try:
            reply = transport.decode(data)
        except Exception as exc:  # the worker sent something other than plain data
            return {"error": f"the worker's answer is not plain data ({type(exc).__name__}: {exc})",
                    "tampered": ["the worker's answer channel (sent something other than plain data)"]}
        if type(reply) is not dict:
            return {"error": "the worker's answer is not a dict", "tampered": ["the worker's answer channel"]}
        return reply

    def _wait(self, deadline: float) -> dict[str, Any]:
        while True:
            try:
                if self.conn.poll(0.02):
                    return self._recv()
            except (EOFError, OSError, ConnectionResetError):
                self._reap()
                raise WorkerCrash(self.proc.exitcode) from None
            if not self.proc.is_alive():
                # the answer may have arrived just before the process ended
                try:
                    if self.conn.poll(0):
                        return self._recv()
                except (EOFError, OSError):
                    pass
                self._reap()
                raise WorkerCrash(self.proc.exitcode)
            if time.monotonic() > deadline:
                self.kill()
                raise WorkerTimeout()

    def _reap(self) -> None:
        if self.proc is not None:
            self.proc.join(timeout=5)
            if self.proc.is_alive():
                self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=10)
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass

    def close(self) -> None:
        self.kill()


_fresh: dict[str, list[Worker]] = {}
_CONTEXT = None
FORKSERVER_PRELOAD = ["torch", "torch._dynamo", "numpy", "triton", "triton.language", "triton.runtime.interpreter",
                      "autokernel.harness.worker", "autokernel.harness.integrity", "autokernel.harness.launches",
                      "autokernel.harness.timing", "autokernel.problems.registry"]


def _context():
    """Workers are forked from a pristine forkserver that imported torch and triton once
    (never any kernel, never CUDA): a fresh worker per evaluation then costs a fork, not a
    torch import.  ``spawn`` where forkserver is not available."""
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing

        import torch.multiprocessing as tmp

        if "forkserver" in multiprocessing.get_all_start_methods():
            _CONTEXT = tmp.get_context("forkserver")
            _CONTEXT.set_forkserver_preload(FORKSERVER_PRELOAD)
        else:
            _CONTEXT = tmp.get_context("spawn")
    return _CONTEXT


def acquire(device: str) -> Worker:
    """A fresh worker for ``device``: one started in the background earlier, or a new one.
    A worker is handed out once: it judges one kernel and is then killed (``release``)."""
    pool = _fresh.setdefault(device, [])
    while pool:
        worker = pool.pop(0)
        if worker.alive and not worker.used:
            worker.wait_ready()
            return worker
        worker.kill()
    worker = Worker(device)
    worker.start()
    return worker


@atexit.register
def _close_fresh_workers() -> None:
    gc.collect()
    for pool in _fresh.values():
        for worker in pool:
            worker.kill()
    _fresh.clear()


# Fresh workers kept starting or waiting per device.  On a GPU a worker needs 2-3 s to be
# ready (CUDA context, the Triton self-test, the fingerprint), more than a warm evaluation of a
# small kernel takes: with one in the background, back-to-back evaluations on the H200 each
# waited 0.7-1.0 s for it (BENCHMARKS.md, fourth session).  With two, each has had the time of
# two evaluations.  On a CPU a fork is ready at once and two more processes would only compete
# for the cores.
PRESTART_DEPTH = {"gpu": 2, "cpu": 1}


def prestart(device: str) -> None:
    """Top up the fresh workers started in the background for ``device`` to ``PRESTART_DEPTH``,
    so that the next evaluation does not wait for one to start."""
    pool = _fresh.setdefault(device, [])
    for worker in [w for w in pool if not w.alive]:
        pool.remove(worker)
        worker.kill()
    while len(pool) < PRESTART_DEPTH["gpu" if device.startswith("cuda") else "cpu"]:
        worker = Worker(device)
        worker.launch()
        pool.append(worker)


def release(worker: Worker) -> None:
    """A worker that ran a kernel is never reused: kill it."""
    worker.kill()
