"""The worker process: the only place untrusted kernel code runs.

Parent side: ``Worker`` starts a process with the ``spawn`` context (``TRITON_INTERPRET=1`` in
its environment when the device is the CPU, removed otherwise), sends requests over a pipe and
waits for each answer with a deadline.  No answer by the deadline: the process is killed and
``WorkerTimeout`` raised.  The process died (segfault, abort, CUDA fault): ``WorkerCrash``
with the exit signal.  Tensors travel through ``torch.multiprocessing``: CPU tensors in shared
memory and CUDA tensors through CUDA IPC, so the parent sees in place whatever the kernel did
to its inputs; the parent keeps every tensor it sent alive until the answer is in.

Worker side (``main``): stdout is pointed at stderr (a kernel that prints cannot spoil the
``--json`` output), torch and triton are imported, and the ids of the critical callables are
snapshotted (``integrity.snapshot``) before any candidate is imported.  Requests:

``load``  execute a kernel file's text as a fresh module into a slot (``candidate``/
          ``incumbent``); the request names the problem (its spec), which the worker loads
          once and uses for ``problem.kernel_callable`` (KernelBench builds ``ModelNew``);
``run``   call the kernel ``calls`` times on the given inputs under ``KernelWatch`` (records
          the aten ops the kernel calls; poisons its fresh floating allocations) and return the
          outputs, the ops, and whether an output reuses the storage of the previous run's;
``time``  time one or more slots on input sets (timing.py), then call the candidate once more
          on every set under the watch and return those outputs for re-checking;
``exit``.

Workers are shared: ``acquire``/``release`` keep idle healthy workers in a process-wide pool
(one worker serves any problem), a worker is recycled after ``MAX_USES`` evaluations, and after
a crash, timeout or tampering a replacement is started in the background (``prestart``).

Every answer carries ``tampered``: critical callables whose ids changed since the snapshot.
Errors raised by the kernel come back as one line plus the last frame in the kernel file.
The judging — references, comparisons, verdicts — happens in the parent.
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import itertools
import os
import signal
import sys
import time
import traceback
from typing import Any

STARTUP_TIMEOUT_S = 240.0


class WorkerTimeout(Exception):
    pass


class WorkerCrash(Exception):
    def __init__(self, exitcode: int | None, detail: str = ""):
        self.exitcode = exitcode
        super().__init__(describe_exit(exitcode) + (f": {detail}" if detail else ""))


def describe_exit(code: int | None) -> str:
    if code is None:
        return "worker process stopped answering"
    if code < 0:
        try:
            return f"worker process killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker process killed by signal {-code}"
    return f"worker process exited with code {code}"


# ====================================================================== parent side
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


class Worker:
    """Parent-side handle of one worker process."""

    def __init__(self, device: str):
        self.device = device
        self.evaluations = 0  # how many kernels this worker has judged (it is recycled after MAX_USES)
        self.proc = None
        self.conn = None
        self.info: dict[str, Any] = {}

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self) -> dict[str, Any]:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Spawn the process without waiting for it to be ready (it imports torch meanwhile)."""
        import torch.multiprocessing as tmp

        ctx = tmp.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=main, args=(child_conn, self.device),
                                daemon=True, name="autokernel-worker")
        saved = os.environ.get("TRITON_INTERPRET")
        try:
            if self.device.startswith("cuda"):
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = "1"
            with _main_module_hidden():
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
        self.info = info
        return info

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if not self.alive:
            raise WorkerCrash(self.proc.exitcode if self.proc else None)
        try:
            self.conn.send(message)
        except (BrokenPipeError, EOFError, OSError):
            self._reap()
            raise WorkerCrash(self.proc.exitcode) from None
        return self._wait(time.monotonic() + timeout_s)

    def _wait(self, deadline: float) -> dict[str, Any]:
        while True:
            try:
                if self.conn.poll(0.02):
                    return self.conn.recv()
            except (EOFError, OSError, ConnectionResetError):
                self._reap()
                raise WorkerCrash(self.proc.exitcode) from None
            if not self.proc.is_alive():
                # the answer may have arrived just before the process ended
                try:
                    if self.conn.poll(0):
                        return self.conn.recv()
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
        if self.alive:
            try:
                self.conn.send({"op": "exit"})
                self.proc.join(timeout=5)
            except (OSError, EOFError):
                pass
        self.kill()


MAX_USES = 200  # evaluations before a worker is recycled (compiled kernels pile up in it)
_idle: dict[str, list[Worker]] = {}


def acquire(device: str) -> Worker:
    """An idle healthy worker for ``device`` (shared by all Evaluators of this process), or a
    freshly started one."""
    pool = _idle.setdefault(device, [])
    while pool:
        worker = pool.pop()
        if worker.alive:
            worker.wait_ready()
            return worker
        worker.kill()
    worker = Worker(device)
    worker.start()
    return worker


@atexit.register
def _close_idle_workers() -> None:
    """Let idle workers exit cleanly before multiprocessing terminates them (and free our
    handles on their CUDA tensors first, so that CUDA IPC does not complain)."""
    gc.collect()
    for pool in _idle.values():
        for worker in pool:
            worker.close()
    _idle.clear()


def prestart(device: str) -> None:
    """Start a replacement worker in the background (after a crash, a timeout or tampering),
    so that the next evaluation does not wait for torch to import."""
    pool = _idle.setdefault(device, [])
    if not any(w.alive for w in pool):
        worker = Worker(device)
        worker.launch()
        pool.append(worker)


def release(worker: Worker) -> None:
    """Give a worker back to the pool (killed instead when dead or worn out)."""
    if worker.alive and worker.evaluations < MAX_USES:
        _idle.setdefault(worker.device, []).append(worker)
    else:
        worker.kill()


# ====================================================================== worker side
_module_counter = itertools.count()


def main(conn, device: str) -> None:
    os.dup2(2, 1)  # anything the kernel prints goes to stderr
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends us
    if not device.startswith("cuda"):
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        state = _State(device)
    except BaseException as exc:  # report, then stop
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
        return
    conn.send({"ready": True, "pid": os.getpid(), "device_name": state.device_name})
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        op = message.get("op")
        if op == "exit":
            return
        try:
            reply = state.handle(op, message)
        except Exception as exc:  # a bug of ours, not the kernel's: report it plainly
            reply = {"error": f"harness worker error: {type(exc).__name__}: {exc}", "internal": True,
                     "trace": traceback.format_exc(limit=6)}
        reply["tampered"] = state.tampered()
        try:
            conn.send(reply)
        except Exception as exc:  # outputs that cannot be sent (not tensors, not picklable)
            conn.send({"error": f"cannot send the kernel's outputs back: {type(exc).__name__}: {exc}",
                       "tampered": reply["tampered"]})
        if reply.get("cuda_fault"):
            # the CUDA context is dead after a device fault: nothing more can run here
            os._exit(3)


class _State:
    def __init__(self, device: str):
        import torch
        import triton  # noqa: F401  (imported before the snapshot on purpose)
        import triton.language  # noqa: F401

        from . import integrity, timing  # noqa: F401

        self.torch = torch
        self.device = device
        if device.startswith("cuda"):
            if torch.device(device).index is not None:
                torch.cuda.set_device(torch.device(device))
            torch.cuda.init()
            self.device_name = torch.cuda.get_device_name(torch.device(device))
        else:
            self.device_name = "cpu"
        self.problems: dict[str, Any] = {}
        self.problem = None
        self.timer = timing.Timer(device)
        self.slots: dict[str, Any] = {}
        self.paths: dict[str, str] = {}
        self.callables: dict[tuple, Any] = {}
        self.held: tuple = ()
        self.watch_cls = make_watch_class()
        _self_test(device, self.watch_cls)
        self.snapshot = integrity.snapshot()

    def tampered(self) -> list[str]:
        from . import integrity

        return integrity.tampered(self.snapshot)

    # ------------------------------------------------------------ dispatch
    def handle(self, op: str, message: dict[str, Any]) -> dict[str, Any]:
        if op == "ping":
            return {"ok": True}
        if op == "load":
            if message.get("build_dir"):  # load_inline builds here: a killed build leaves no lock for the next
                os.environ["TORCH_EXTENSIONS_DIR"] = message["build_dir"]
            spec = message.get("problem")
            if spec and spec not in self.problems:
                self.problems[spec] = load_problem(spec)
            self.problem = self.problems.get(spec) if spec else None
            return self.load(message["slot"], message["path"], message.get("source"))
        if op == "run":
            return self.run(message)
        if op == "time":
            return self.time(message)
        return {"error": f"unknown request {op!r}", "internal": True}

    def load(self, slot: str, path: str, source: str | None = None) -> dict[str, Any]:
        """Execute ``source`` (the text the parent checked; else the file) as a fresh module."""
        import types

        name = f"autokernel_candidate_{next(_module_counter)}"
        try:
            if source is None:
                with open(path) as f:
                    source = f.read()
            code = compile(source, path, "exec")
            module = types.ModuleType(name)
            module.__file__ = path
            sys.modules[name] = module
            exec(code, module.__dict__)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return {"error": describe_error(exc, [path])}
        if (self.problem is None or self.problem.make_kernel is None) and not callable(getattr(module, "kernel_fn", None)):
            return {"error": "kernel file defines no callable kernel_fn"}
        self.slots[slot] = module
        self.paths[slot] = path
        self.held = ()
        self.callables = {k: v for k, v in self.callables.items() if k[0] != slot}
        return {"ok": True}

    def kernel(self, slot: str, shape: dict, dtype) -> Any:
        key = (slot, tuple(shape.items()), dtype)
        if key not in self.callables:
            module = self.slots[slot]
            if self.problem is not None:
                fn = self.problem.kernel_callable(module, shape, dtype, self.device)
            else:
                fn = getattr(module, "kernel_fn", None)
                if not callable(fn):
                    raise AttributeError("kernel file defines no callable kernel_fn")
            self.callables[key] = fn
        return self.callables[key]

    def _call(self, fn, args) -> tuple:
        out = fn(*args)
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()
        return out if isinstance(out, tuple) else (tuple(out) if isinstance(out, list) else (out,))

    def _watched_call(self, fn, args, poison):
        watch = self.watch_cls(poison)
        with watch:
            outs = self._call(fn, args)
        return outs, watch.ops

    def run(self, m: dict[str, Any]) -> dict[str, Any]:
        slot = m.get("slot", "candidate")
        paths = [self.paths.get(slot, "")]
        try:
            fn = self.kernel(slot, m["shape"], m["dtype"])
            results, ops = [], set()
            for _ in range(int(m.get("calls", 1))):
                outs, called = self._watched_call(fn, m["args"], m.get("poison"))
                ops |= called
                results.append(outs)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return self._kernel_error(exc, paths)
        first = results[0]
        same = _shares_storage(first, self.held) or (len(results) > 1 and _shares_storage(results[-1], first))
        self.held = results[-1]
        return {"outs": results, "ops": sorted(ops), "same_storage": same}

    def time(self, m: dict[str, Any]) -> dict[str, Any]:
        slots = m["slots"]
        cases = m["cases"]
        try:
            fns: dict[str, list] = {}
            for slot in slots:
                fns[slot] = []
                for case in cases:
                    kernel = self.kernel(slot, case["shape"], case["dtype"])
                    sets = case["sets"]
                    fns[slot].append(lambda i, kernel=kernel, sets=sets: kernel(*sets[i % len(sets)]))
            n_sets = min(len(c["sets"]) for c in cases)
            if len(slots) == 1:
                samples = {slots[0]: [[self.timer.measure(f, n_sets)] for f in fns[slots[0]]]}
            else:
                from .timing import time_rounds

                samples = time_rounds(self.timer, fns, n_sets, int(m.get("rounds", 5)))
            del fns
            recheck = []
            ops: set[str] = set()
            for case in cases:
                kernel = self.kernel(slots[0], case["shape"], case["dtype"])
                outs_per_set = []
                for args in case["sets"]:
                    outs, called = self._watched_call(kernel, args, m.get("poison"))
                    ops |= called
                    outs_per_set.append(outs)
                recheck.append(outs_per_set)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return self._kernel_error(exc, [self.paths.get(s, "") for s in slots])
        return {"samples": samples, "recheck": recheck, "ops": sorted(ops), "kind": self.timer.kind}

    def _kernel_error(self, exc: BaseException, paths: list[str]) -> dict[str, Any]:
        return {"error": describe_error(exc, paths), "cuda_fault": is_cuda_fault(exc)}


def _self_test(device: str, watch_cls) -> None:
    """Run a trusted Triton kernel under the watch once, so that everything torch and triton
    set up lazily on first use (torch._dynamo wraps torch.manual_seed when a dispatch mode is
    first entered, drivers, launchers) is in place before the tamper snapshot."""
    import torch
    import torch._dynamo  # noqa: F401
    import triton
    import triton.language as tl

    @triton.jit
    def _copy(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

    x = torch.arange(100, dtype=torch.float32, device=device)
    with watch_cls(float("nan")):
        y = torch.empty_like(x)
        _copy[(2,)](x, y, x.numel(), BLOCK=64)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    if not torch.equal(x, y):
        raise RuntimeError("the worker's Triton self-test computed a wrong copy")


def _storages(outs: tuple) -> set[int]:
    import torch

    return {o.untyped_storage().data_ptr() for o in outs if isinstance(o, torch.Tensor) and o.numel() > 0}


def _shares_storage(a: tuple, b: tuple) -> bool:
    return bool(_storages(a) & _storages(b))


def make_watch_class():
    """The dispatch mode the kernel runs under (built lazily: it needs torch)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from .integrity import POISONED_ALLOCATIONS

    torch_dir = os.path.dirname(torch.__file__)
    here = os.path.abspath(__file__)
    interpreter_suffix = os.path.join("triton", "runtime", "interpreter.py")

    def called_by_triton_interpreter() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith(torch_dir) or filename == here:
                frame = frame.f_back
                continue
            return filename.endswith(interpreter_suffix)
        return False

    class KernelWatch(TorchDispatchMode):
        """Records every aten op the kernel calls; fills its fresh floating allocations with
        ``poison`` so that elements it never writes show up.  Ops the Triton interpreter
        makes on the kernel's behalf (copying arguments in and out) are neither recorded nor
        poisoned."""

        def __init__(self, poison: float | None):
            super().__init__()
            self.poison = poison
            self.ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if called_by_triton_interpreter():
                return out
            name = str(func.overloadpacket)
            self.ops.add(name)
            if (self.poison is not None and name in POISONED_ALLOCATIONS and isinstance(out, torch.Tensor)
                    and out.is_floating_point() and out.numel() > 0):
                out.fill_(self.poison)
            return out

    return KernelWatch


def is_cuda_fault(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    return any(s in text for s in ("AcceleratorError", "CUDA error", "illegal memory access", "device-side assert",
                                   "unspecified launch failure", "misaligned address", "CUDA_ERROR"))


def describe_error(exc: BaseException, paths: list[str]) -> str:
    """One line: the error, then the last traceback frame inside the kernel file."""
    text = " ".join(str(exc).split())
    if len(text) > 400:
        text = text[:400] + "..."
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    wanted = {os.path.abspath(p) for p in paths if p}
    where = None
    if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename) in wanted:
        where = f"{os.path.basename(exc.filename)}:{exc.lineno}"
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename) in wanted:
            where = f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
    return f"{line} (at {where})" if where else line


def load_problem(spec: Any):
    """A problem from a spec: a built-in kind, a problem file path, or ``package.module:factory``
    (a Python import path of a function returning a Problem; used by tests and tools)."""
    from ..problems.base import Problem
    from ..problems.registry import get_problem

    if isinstance(spec, Problem):
        return spec
    text = str(spec)
    module_name, sep, attr = text.partition(":")
    if sep and attr.isidentifier() and all(part.isidentifier() for part in module_name.split(".")):
        import importlib

        return getattr(importlib.import_module(module_name), attr)()
    return get_problem(text)
