"""The worker process: the only place untrusted kernel code runs.

Parent side: ``Worker`` starts a process with the ``spawn`` context (``TRITON_INTERPRET=1`` in
its environment when the device is the CPU, removed otherwise), sends requests over a pipe and
waits for each answer with a deadline.  No answer by the deadline: the process is killed and
``WorkerTimeout`` raised.  The process died (segfault, abort, CUDA fault): ``WorkerCrash``
with the exit signal.

Requests go parent -> worker as pickles (the worker unpickles what the judge made: input
tensors in shared memory / CUDA IPC, and the parent's own output buffers).  Answers go worker
-> parent as plain data only (transport.py): the parent decodes them with an unpickler that
refuses every global, so nothing the candidate made can come alive in the judge.  Output
values come back by the worker copying them into the parent's buffers.

One worker judges one kernel: ``acquire`` hands out a fresh worker (never one that loaded a
kernel before) and starts the next one in the background (``prestart``) so that the loop does
not wait for torch to import; a used worker is killed, never pooled.  The candidate and the
incumbent run in two different workers.

Worker side (``main``): stdout is pointed at stderr, torch and triton are imported, the
launch hook is installed on Triton's launch path (``launches``), a trusted Triton kernel runs
once under the watch (everything torch and triton set up lazily is in place), and the
fingerprint of the critical callables (ids and code objects, integrity.fingerprint) goes to
the parent with the ready message: the baseline lives in the parent.  Every answer carries the
current fingerprint; the parent compares.  Requests:

``load``     execute a kernel file's text as a fresh module;
``call``     call the kernel once on every input set given (fresh sets, each used once),
             every call judged the same way (``_judged_call``): under the ``KernelWatch``
             dispatch mode (records aten ops, poisons fresh floating allocations), timed
             (CUDA events with an L2 flush on a GPU, the wall clock in the interpreter), its
             Triton launches counted, its threads counted, and its outputs checked (plain
             tensors of the declared dtype/shape/device, allocated during the call under the
             watch, aliasing no input and no output still held, written by a Triton kernel of
             the file's own).  The outputs are kept until the next ``call``: which calls get
             their values compared is decided by the parent afterwards;
``collect``  copy the kept outputs of the calls the parent names into the parent's buffers;
``exit``.
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
from collections import deque
from typing import Any

from . import transport

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
        self.proc = None
        self.conn = None
        self.info: dict[str, Any] = {}
        self.baseline: dict[str, str] = {}  # fingerprint taken before any kernel was loaded
        self.baseline_digest = ""
        self.used = False

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
        try:
            self.conn.send(message)
        except (BrokenPipeError, EOFError, OSError):
            self._reap()
            raise WorkerCrash(self.proc.exitcode) from None
        reply = self._wait(time.monotonic() + timeout_s)
        now = reply.pop("fingerprint", None)
        digest = reply.pop("fingerprint_digest", None)
        tampered = list(reply.get("tampered") or [])
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


def prestart(device: str) -> None:
    """Start the next fresh worker in the background (unless one is already waiting), so that
    the next evaluation does not wait for torch to import."""
    pool = _fresh.setdefault(device, [])
    if not any(w.alive for w in pool):
        worker = Worker(device)
        worker.launch()
        pool.append(worker)


def release(worker: Worker) -> None:
    """A worker that ran a kernel is never reused: kill it."""
    worker.kill()


# ====================================================================== worker side
_module_counter = itertools.count()
# GPU spin before each call (see _judged_call): it keeps the GPU busy while this process enters the
# watch and the kernel's Python runs, so that host time does not show as GPU time.  With a fixed ~50 us
# spin the H200 runs of 2026-12-01 timed the rotary starter at 378 us where do_bench measured 62 us.
# Every call now proves it was covered (the host finished enqueueing before the spin ended, by the
# GPU's own clock); a call that was not is reported, and each call sizes the next call's spin to
# twice its own host time (between the bounds below; a call that compiled asks for the most once).
# Doubling on every uncovered call instead grew the spin to 32 ms a call and made evaluations 5x slower.
GPU_COVER_CYCLES = 1_000_000
GPU_COVER_US_MIN, GPU_COVER_US_MAX = 150.0, 5_000.0
HISTORY_CALLS = 16  # outputs of the last calls stay held, so that a ring of reused buffers shows
HISTORY_BYTES = {"gpu": 4 << 30, "cpu": 256 << 20}


def main(conn, device: str) -> None:
    os.dup2(2, 1)  # anything the kernel prints goes to stderr
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends us
    if device.startswith("cuda"):
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        state = _State(device)
    except BaseException as exc:  # report, then stop
        where = traceback.extract_tb(exc.__traceback__)[-1:]
        detail = f" (at {where[0].filename}:{where[0].lineno})" if where else ""
        conn.send_bytes(transport.encode({"error": f"{type(exc).__name__}: {exc}{detail}"}))
        return
    from . import integrity

    baseline = integrity.fingerprint()
    baseline_digest = fingerprint_digest(baseline)
    conn.send_bytes(transport.encode({"ready": True, "pid": os.getpid(), "device_name": state.device_name,
                                      "fingerprint": baseline, "fingerprint_digest": baseline_digest}))
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
        del message
        try:
            if op != "collect":  # no kernel code runs during a collect
                now = integrity.fingerprint()
                digest = fingerprint_digest(now)
                reply["fingerprint_digest"] = digest
                if digest != baseline_digest:
                    reply["fingerprint"] = now
            data = transport.encode(reply)
        except Exception as exc:
            data = transport.encode({"error": f"harness worker error: cannot encode the answer: {exc}",
                                     "internal": True, "trace": ""})
        conn.send_bytes(data)
        if reply.get("cuda_fault"):
            # the CUDA context is dead after a device fault: nothing more can run here
            os._exit(3)


class _State:
    def __init__(self, device: str):
        import threading

        import torch
        import triton  # noqa: F401  (imported before the fingerprint on purpose)
        import triton.language  # noqa: F401

        from . import integrity, launches, timing  # noqa: F401

        self.torch = torch
        self.threading = threading
        self.device = device
        self.gpu = device.startswith("cuda")
        if self.gpu:
            if torch.device(device).index is not None:
                torch.cuda.set_device(torch.device(device))
            torch.cuda.init()
            self.device_name = torch.cuda.get_device_name(torch.device(device))
            self._flush = torch.empty(timing.FLUSH_BYTES, dtype=torch.int8, device=device)
            self._gpu_sleep = getattr(torch.cuda, "_sleep", None)
        else:
            self.device_name = "cpu"
            self._flush = None
            self._gpu_sleep = None
        self.problems: dict[str, Any] = {}
        self.problem = None
        self.slots: dict[str, Any] = {}
        self.paths: dict[str, str] = {}
        self.callables: dict[tuple, Any] = {}
        self.kept: list[tuple] = []  # outputs of the last ``call`` request, by call index
        self.history: deque = deque()  # outputs of earlier calls, still held (ring detection)
        self.history_bytes = 0
        self.launches = launches.install()
        self.watch_cls = make_watch_class(self.launches)
        _self_test(device, self.watch_cls)
        self.starts = launches.install_start_counters()
        self.cover_cycles = GPU_COVER_CYCLES
        self.uncovered = 0
        self.threads_py = threading.active_count()

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
        if op == "call":
            return self.call(message)
        if op == "collect":
            return self.collect(message)
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

    # ------------------------------------------------------------ judged calls
    def _retire_kept(self) -> None:
        """Move the kept outputs to the history (held, so that their memory cannot be handed
        out again while a reused buffer could still be recognised)."""
        budget = HISTORY_BYTES["gpu" if self.gpu else "cpu"]
        for outs in self.kept:
            size = sum(o.untyped_storage().nbytes() for o in outs
                       if type(o) is self.torch.Tensor and o.layout == self.torch.strided)
            self.history.append((outs, size))
            self.history_bytes += size
        self.kept = []
        while self.history and (len(self.history) > HISTORY_CALLS or self.history_bytes > budget):
            _, size = self.history.popleft()
            self.history_bytes -= size

    def call(self, m: dict[str, Any]) -> dict[str, Any]:
        slot = m.get("slot", "candidate")
        paths = [self.paths.get(slot, "")]
        self._retire_kept()
        sets = m["sets"]
        expected = m.get("expected")  # [(shape, dtype name)] per output, or None
        module = self.slots.get(slot)
        own = module.__dict__ if module is not None else None
        require_launch = bool(m.get("require_launch", True))
        inputs = [t for args in sets for t in _tensors_in(args)]
        times, ops, findings, bad = [], set(), [], []
        uncovered = []
        try:
            fn = self.kernel(slot, m["shape"], m["dtype"])
            for i, args in enumerate(sets):
                before = self.uncovered
                outs, t_us, call_ops, call_findings = self._judged_call(fn, args, m.get("poison"), own,
                                                                         require_launch)
                times.append(t_us)
                if self.uncovered != before:
                    uncovered.append(i)
                ops |= call_ops
                findings += [dict(f, call=i) for f in call_findings]
                problem = check_outputs(outs, expected, self.device) if expected is not None else None
                bad.append(problem)
                if problem is None:
                    alias = self._aliasing(outs, inputs)
                    if alias:
                        findings.append({"rule": "cached-output", "message": alias, "call": i})
                self.kept.append(outs)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return self._kernel_error(exc, paths)
        return {"times_us": times, "ops": sorted(ops), "findings": findings, "bad": bad, "uncovered": uncovered,
                "kind": "gpu" if self.gpu else "interpreter"}

    def _judged_call(self, fn, args, poison, own_globals, require_launch):
        """One call of the kernel, the same for every call the worker makes."""
        torch = self.torch
        watch = self.watch_cls(poison, timed_fills=self.gpu, flush=self._flush)
        record = self.launches.begin(own_globals)
        py_before = self.threading.active_count()
        threads_started, streams_made = self.starts.threads, self.starts.streams
        if self.gpu:
            cover, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            self._flush.zero_()
            cover.record()
            host_from = time.perf_counter()
            if self._gpu_sleep is not None:
                self._gpu_sleep(self.cover_cycles)
            start.record()
        t0 = time.perf_counter()
        try:
            with watch:
                raw = fn(*args)
                mode_problem = watch.still_in_charge()
        finally:
            self.launches.end()
        if self.gpu:
            host_us = (time.perf_counter() - host_from) * 1e6
            end.record()
            torch.cuda.synchronize()
            t_us = start.elapsed_time(end) * 1000.0 - watch.fill_us()
            spin_us = cover.elapsed_time(start) * 1000.0
            if not host_covered(host_us, spin_us):
                self.uncovered += 1
            self.cover_cycles = next_cover_cycles(self.cover_cycles, spin_us, host_us)
        else:
            t_us = (time.perf_counter() - t0) * 1e6
        outs = raw if type(raw) is tuple else (tuple(raw) if type(raw) is list else (raw,))
        findings = []
        if mode_problem:
            findings.append({"rule": "torch-op", "message": mode_problem})
        if record.odd_argument:
            findings.append({"rule": "foreign-compute", "message": (
                f"a Triton kernel was launched with {record.odd_argument}: launch arguments must be "
                "tensors, numbers, dtypes or Triton objects")})
        extra_py = self.threading.active_count() - max(py_before, self.threads_py)
        if self.starts.threads != threads_started:
            findings.append({"rule": "threads-or-streams",
                             "message": f"the call started {self.starts.threads - threads_started} thread(s)"})
        elif self.starts.streams != streams_made or self.starts.streams:
            findings.append({"rule": "threads-or-streams",
                             "message": "the kernel created a CUDA stream (work on it escapes the timing)"})
        elif extra_py > 0:
            findings.append({"rule": "threads-or-streams",
                             "message": f"{extra_py} Python thread(s) more after the call than before"})
        # OS threads (/proc/self/task) are not a finding: torch's and BLAS's pools grow lazily on
        # first use of a size (seen with fused_mlp's held-out shapes); native threads need native
        # code, which the static rules keep out (ctypes, cffi)
        tensors = [o for o in outs if type(o) is torch.Tensor and o.layout == torch.strided and not o.is_meta
                   and o.numel() > 0]
        for i, o in enumerate(tensors):
            ptr = o.untyped_storage().data_ptr()
            if ptr not in watch.allocated:
                findings.append({"rule": "cached-output", "message": (
                    f"output {i} was not allocated during the call (by an allocation the harness saw): "
                    "a kept buffer, another thread's memory, or an allocation hidden from the watch")})
            elif require_launch and ptr not in record.own_storages:
                if not record.own:
                    findings.append({"rule": "no-kernel", "message": (
                        "the call launched no Triton kernel defined in the kernel file "
                        f"({record.foreign} launch(es) of kernels from elsewhere)")})
                else:
                    findings.append({"rule": "foreign-compute", "message": (
                        f"output {i} was not passed to any Triton kernel of the file's own: it was computed "
                        "by something else (PyTorch, numpy, ctypes, ...)")})
        return outs, float(t_us), watch.ops, findings

    def _aliasing(self, outs: tuple, inputs: list) -> str | None:
        torch = self.torch
        spans = []
        for o in outs:
            if type(o) is torch.Tensor and o.layout == torch.strided and o.numel() > 0:
                s = o.untyped_storage()
                spans.append((s.data_ptr(), s.data_ptr() + s.nbytes()))
        for a, (lo, hi) in enumerate(spans):
            for b, (lo2, hi2) in enumerate(spans[:a]):
                if lo < hi2 and lo2 < hi:
                    return f"outputs {b} and {a} share memory"
        def overlaps(tensors, what):
            for t in tensors:
                if type(t) is torch.Tensor and t.layout == torch.strided and t.numel() > 0:
                    s = t.untyped_storage()
                    lo2, hi2 = s.data_ptr(), s.data_ptr() + s.nbytes()
                    for i, (lo, hi) in enumerate(spans):
                        if lo < hi2 and lo2 < hi:
                            return f"output {i} shares memory with {what}"
            return None
        found = overlaps(inputs, "an input")
        if found:
            return found
        for outs_before in self.kept:
            found = overlaps(outs_before, "the output of an earlier call")
            if found:
                return found
        for outs_before, _ in self.history:
            found = overlaps(outs_before, "the output of an earlier call")
            if found:
                return found
        return None

    def collect(self, m: dict[str, Any]) -> dict[str, Any]:
        """Copy the kept outputs of the calls ``m["indices"]`` into the parent's buffers."""
        done = []
        for index, buffers in zip(m["indices"], m["buffers"]):
            outs = self.kept[int(index)]
            problem = check_outputs(outs, [(tuple(b.shape), str(b.dtype)) for b in buffers], self.device)
            if problem is None:
                for dst, src in zip(buffers, outs):
                    dst.copy_(src)
            done.append(problem)
        if self.gpu:
            self.torch.cuda.synchronize()
        return {"bad": done}

    def _kernel_error(self, exc: BaseException, paths: list[str]) -> dict[str, Any]:
        return {"error": describe_error(exc, paths), "cuda_fault": is_cuda_fault(exc)}


def host_covered(host_us: float, spin_us: float) -> bool:
    """Was the GPU still spinning when the host had enqueued the whole call?  ``host_us``: the
    host's time from just before the spin was enqueued to just before the end event;
    ``spin_us``: the spin's length by the GPU's clock (cover event to start event).  If the
    host took longer, the GPU may have idled between the start event and the kernel, and that
    idle time would count as the kernel's."""
    return host_us < spin_us


def next_cover_cycles(cycles: int, spin_us: float, host_us: float) -> int:
    """The next call's spin, in GPU clock cycles: twice this call's host time, within
    [GPU_COVER_US_MIN, GPU_COVER_US_MAX], converted at the clock rate this spin ran at."""
    cycles_per_us = cycles / spin_us if spin_us > 0 else 2_000.0
    want_us = min(GPU_COVER_US_MAX, max(GPU_COVER_US_MIN, 2.0 * host_us))
    return max(1, int(want_us * cycles_per_us))


def fingerprint_digest(fingerprint: dict[str, str]) -> str:
    import hashlib

    text = "\n".join(f"{k}={v}" for k, v in sorted(fingerprint.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _tensors_in(args: Any) -> list:
    import torch

    if type(args) is torch.Tensor:
        return [args]
    if type(args) in (list, tuple):
        return [t for a in args for t in _tensors_in(a)]
    return []


def check_outputs(outs: tuple, expected: list, device: str) -> str | None:
    """None when ``outs`` are plain tensors with the expected (shape, dtype) each, on the
    device; else what is wrong, in one line."""
    import torch

    if len(outs) != len(expected):
        return f"kernel returned {len(outs)} output(s); the reference returns {len(expected)}"
    for i, (out, (shape, dtype)) in enumerate(zip(outs, expected)):
        label = f"output {i}" if len(outs) > 1 else "output"
        kind = type(out)
        if kind is not torch.Tensor:
            if isinstance(out, torch.Tensor):
                return f"{label} is a {kind.__name__}, a subclass of torch.Tensor: return a plain tensor"
            return f"{label} is a {kind.__name__}, not a tensor"
        if tuple(out.shape) != tuple(shape):
            return f"{label} has shape {list(out.shape)}; expected {list(shape)}"
        if str(out.dtype) != str(dtype):
            return f"{label} has dtype {str(out.dtype).replace('torch.', '')}; expected {str(dtype).replace('torch.', '')}"
        if out.layout != torch.strided or out.is_meta:
            return f"{label} is a {out.layout} tensor{' on the meta device' if out.is_meta else ''}; return a dense one"
        if out.device.type != torch.device(device).type:
            return f"{label} is on {out.device}; expected {device}"
    return None


def _self_test(device: str, watch_cls) -> None:
    """Run a trusted Triton kernel under the watch, so that everything torch and triton set
    up lazily on first use (torch._dynamo wraps torch.manual_seed when a dispatch mode is first
    entered, drivers, launchers, thread pools) is in place before the fingerprint and the
    thread counts are taken."""
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
    big = torch.rand(1 << 22, device=device)  # start torch's own thread pool now, not in a kernel's call
    big.add_(1.0).sum()
    big.clone().copy_(big)


def make_watch_class(launch_record):
    """The dispatch mode the kernel runs under (built lazily: it needs torch)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

    from . import launches
    from .integrity import POISONED_ALLOCATIONS

    torch_dir = os.path.dirname(torch.__file__)
    interpreter_codes = launches.interpreter_code_objects()
    tensor_type = torch.Tensor

    def called_by_triton_interpreter() -> bool:
        """Only the real interpreter's own code objects, and only inside a launch the hook saw
        (a frame compiled under the interpreter's file name is not the interpreter)."""
        if not launch_record.inside_launch():
            return False
        frame = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            if code in interpreter_codes:
                return True
            if code.co_filename.startswith(torch_dir) or code.co_filename == __file__:
                frame = frame.f_back
                continue
            return False
        return False

    class KernelWatch(TorchDispatchMode):
        """Records every aten op the kernel calls and the storage of every tensor those ops
        make; fills fresh floating allocations with ``poison`` so that elements the kernel
        never writes show up.  Ops the real Triton interpreter makes on the kernel's behalf
        (copying arguments in and out) are neither recorded nor poisoned."""

        def __init__(self, poison: float | None, timed_fills: bool = False, flush=None):
            super().__init__()
            self.flush = flush
            self.poison = poison
            self.ops: set[str] = set()
            self.allocated: set[int] = set()
            self.timed_fills = timed_fills
            self._fills: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if type(out) is tensor_type:
                self.allocated.add(out.untyped_storage().data_ptr())
            if called_by_triton_interpreter():
                return out
            name = str(func.overloadpacket)
            self.ops.add(name)
            if (self.poison is not None and name in POISONED_ALLOCATIONS and type(out) is tensor_type
                    and out.is_floating_point() and out.numel() > 0):
                if self.timed_fills:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    out.fill_(self.poison)
                    if self.flush is not None:  # the fill left the output in L2: cold again, as the call began
                        self.flush.zero_()
                    end.record()
                    self._fills.append((start, end))
                else:
                    out.fill_(self.poison)
            return out

        def still_in_charge(self) -> str | None:
            """After the kernel returned, still inside ``with``: this mode must be the top of
            the dispatch-mode stack and Python dispatch must not be excluded."""
            stack = _get_current_dispatch_mode_stack()
            if not stack or stack[-1] is not self:
                return "the harness's dispatch mode was removed or covered during the call"
            if torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.Python):
                return "Python dispatch was excluded during the call (the harness's watch switched off)"
            return None

        def fill_us(self) -> float:
            return sum(s.elapsed_time(e) for s, e in self._fills) * 1000.0

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
