"""Worker side: the request loop (``main``) and the state that runs kernel calls (``_State``).
See worker.py for the protocol."""
from __future__ import annotations

import itertools
import os
import signal
import sys
import time
import traceback
from collections import deque
from typing import Any

from . import escapes, host_reads, interpreter_as_gpu, launches, registrations, transport
from .gpu_cover import GPU_COVER_CYCLES, host_covered, next_cover_cycles
from .memory import HISTORY_BYTES, HISTORY_CALLS
from .hooks import changed_hooks, outside_hooks
from .output_checks import (check_outputs, digest_sums, digest_values, numel, output_digest, planted, span,
                            take_accessors, tensors_in)
from .problem_spec import can_take_memory, draw_set, load_problem, own_copy, take_memory
from .watch import make_watch_class, records_reader
from .worker_errors import describe_error, is_cuda_fault

_module_counter = itertools.count()
PROFILE_ENV = "AUTOKERNEL_WORKER_PROFILE"  # a folder: benchmarks profile the worker's requests there


def _request_profiler():
    folder = os.environ.get(PROFILE_ENV)
    if not folder:
        return None
    import cProfile

    os.makedirs(folder, exist_ok=True)
    return cProfile.Profile()


def main(conn, device: str) -> None:
    try:
        _serve(conn, device)
    except (ConnectionError, EOFError):
        # the parent is gone (Ctrl-C, or it ended): no one to answer, and nothing to say (its
        # traceback printed under the user's "interrupted; run the same command again")
        return


def _serve(conn, device: str) -> None:
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

    _import_problem_modules()  # their functions draw the timed calls' inputs: in the baseline
    watch = integrity.FingerprintWatch()
    state.fingerprint = watch  # held() after every call
    conn.send_bytes(transport.encode({"ready": True, "pid": os.getpid(), "device_name": state.device_name,
                                      "fingerprint": watch.baseline, "fingerprint_digest": watch.digest}))
    profiler = _request_profiler()
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if profiler is not None:  # unpickling counts: it maps the inputs the parent shared (CUDA IPC)
            profiler.enable()
        try:
            message = _unpickle_request(data)
        except OSError:  # tensors shared through the parent's resource sharer, which is gone
            return
        del data
        nonce = message.pop("nonce", None)  # a local of this loop only: echoed, never handed to the kernel's side
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
                digest = watch.digest_now()
                reply["fingerprint_digest"] = digest
                if digest != watch.digest:  # the parent names what changed from the whole fingerprint
                    try:
                        reply["fingerprint"] = integrity.fingerprint()
                    except Exception:  # namespaces that cannot be read: every name counts as changed
                        reply["fingerprint"] = {}
            reply["nonce"] = nonce
            data = transport.encode(reply)
        except Exception as exc:
            data = transport.encode({"error": f"harness worker error: cannot encode the answer: {exc}",
                                     "internal": True, "trace": "", "nonce": nonce})
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(os.path.join(os.environ[PROFILE_ENV], f"worker-{os.getpid()}.prof"))
        conn.send_bytes(data)
        if reply.get("cuda_fault"):
            # the CUDA context is dead after a device fault: nothing more can run here
            os._exit(3)


def _import_problem_modules() -> None:
    """Every built-in problem module (and the KernelBench adapter), imported before the
    fingerprint's baseline is taken, so that their functions are among the callables a kernel
    must leave alone."""
    import importlib

    from ..problems import kernelbench  # noqa: F401
    from ..problems.registry import BUILTIN_KINDS

    for module in BUILTIN_KINDS.values():
        importlib.import_module(f"autokernel.problems.{module}")


def _unpickle_request(data: bytes) -> dict[str, Any]:
    """The parent's request, as ``Connection.recv`` would read it (the parent is trusted)."""
    from multiprocessing.reduction import ForkingPickler

    return ForkingPickler.loads(data)


# allocations tried to place a rewritten input at its old memory (``_State._landed``), and the most
# bytes the ones that land elsewhere may hold meanwhile (on a GPU an input may be gigabytes)
LANDING_TRIES = 4
LANDING_SPARE_BYTES = 1 << 26


class MemoryAt:
    """Where an input's memory lay: the judge allocates there again once it is freed
    (``_State._landed``), where this PyTorch cannot move memory between storages."""

    def __init__(self, ptr: int, nbytes: int, device: Any):
        self.ptr, self.nbytes, self.device = ptr, nbytes, device


class RequestInputs:
    """The memory ranges of a request's input sets, per call, for ``_aliasing``: an output may not
    share memory with an input the request still holds.  A rewritten call's inputs take the memory
    of the call before it (``_previous_memory``), whose set is let go then: its ranges are no
    longer an input's.  (On a PyTorch that cannot move memory between storages the freed ranges go
    back to the allocator, which may hand them to the next call's output: counted as an input,
    every honest starter was "cached-output" on an H100, red-team pass 29's timed rewrites.)"""

    def __init__(self) -> None:
        self.by_call: dict[int, list[tuple[int, int]]] = {}

    def add(self, call: int, spans: list[tuple[int, int]]) -> None:
        self.by_call[call] = list(spans)

    def released(self, call: int) -> None:
        self.by_call.pop(call, None)

    def held(self) -> list[tuple[int, int]]:
        return [span for spans in self.by_call.values() for span in spans]


def rewrite_sources(entries: Any, count: int) -> dict[int, int]:
    """A request's ``rewrites`` as {call: the earlier call whose memory its inputs take}: an entry
    ``i`` names call ``i - 1``, an entry ``[i, j]`` call ``j``."""
    sources = {}
    for entry in entries or ():
        i, j = (int(entry[0]), int(entry[1])) if isinstance(entry, (list, tuple)) else (int(entry), int(entry) - 1)
        if 0 <= j < i < count:
            sources[i] = j
    return sources


class _State:
    def __init__(self, device: str):
        import gc
        import threading

        import torch
        import triton  # noqa: F401  (imported before the fingerprint on purpose)
        import triton.language  # noqa: F401

        from . import integrity, timing  # noqa: F401

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
            # each call's output digest lands here, copied as the stream gets to it: read after the
            # call's one synchronisation, which it shares (``call``)
            self._digest_host = torch.empty(64, dtype=torch.int64, pin_memory=True)
        else:
            self.device_name = "cpu"
            self._flush = None
            self._gpu_sleep = None
            self._digest_host = None
        self.problems: dict[str, Any] = {}
        self.problem = None
        self.slots: dict[str, Any] = {}
        self.paths: dict[str, str] = {}
        self.callables: dict[tuple, Any] = {}
        self.kept: list[tuple] = []  # outputs of the last ``call`` request, by call index
        self.kept_inputs: list = []  # the input sets it drew, by call index (``draw`` requests)
        self.drawers: dict[str, Any] = {}  # problem spec -> its make_inputs, taken at load
        self.adversaries: dict[str, Any] = {}  # problem spec -> its adversarial_inputs (or None), taken at load
        self.draw_adversarial = None
        self.draw_inputs = None
        self.draw_findings: list = []
        self.kept_digests: list = []  # their output_digest, taken right after each call
        self.kept_spans: list = []  # their storages' memory ranges, taken right after each call
        self.history: deque = deque()  # (outputs, bytes, ranges) of earlier calls, still held (ring detection)
        self.history_bytes = 0
        self.launches = launches.install()
        if not self.gpu:
            interpreter_as_gpu.install()  # TF32 dots and bf16 casts rounded, programs in any order, as on a GPU
        host_reads.install(self.launches, ())
        self.pin_kernel_text = host_reads.kernel_text_pinner()  # the checked text Triton's rewrite must compile
        self.watch_cls = make_watch_class(self.launches)
        self.watch_in_charge = self.watch_cls.still_in_charge  # taken now: the class is within the kernel's reach
        self.watch_records = records_reader(self.watch_cls)  # what each watch saw, out of the watch's attributes
        _self_test(device, self.watch_cls)
        # what the judge's own work calls, taken before any kernel is loaded: a kernel that
        # rebinds time.perf_counter, an Event method or Tensor.copy_ (and puts it back before the
        # end of the request) does not reach these
        self.clock = time.perf_counter
        self.elapsed = torch._C._CudaEventBase.elapsed_time if self.gpu else None
        self.record_event = (getattr(torch._C._CudaEventBase, "record", None) or torch.cuda.Event.record) \
            if self.gpu else None
        self.copy_into = torch._C.TensorBase.copy_
        # the bytes of input storages between an input's elements (``_gaps_filled``): filled from a
        # generator of the judge's own, seeded here from the system
        self.int_of_size = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        self.gap_rng = torch.Generator(device=device)
        self.gap_rng.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        # weak references to storages (``_take_inputs_memory``): C functions, taken now
        self.storage_weak_ref = torch.UntypedStorage._weak_ref
        self.storage_expired = torch.UntypedStorage._expired
        self.storage_free_weak = torch.UntypedStorage._free_weak_ref
        self.storage_from_weak = torch.UntypedStorage._new_with_weak_ptr
        can_take_memory()  # (its C method taken now)
        from torch.multiprocessing import reductions

        self.shared_cache = reductions.shared_cache  # torch's cache of storages other processes shared with us
        take_accessors()  # the checks' numel, storage spans, detach: C functions, never the tensor's own
        self.tensor_guard = integrity.TensorClassGuard()
        self.starts = launches.install_start_counters()
        self.escapes = escapes.install()  # the ways around the watch, counted where the kernel's code uses them
        self.escapes_reported = 0
        self.add_kernel_file = escapes.kernel_file_adder()
        self.registrations = registrations.install()
        self.registered_before_kernel: int | None = None  # the count when the first kernel file loaded
        self.hooks_before_kernel: dict | None = None  # outside_hooks() then: a hook the file's import left counts too
        self.cover_cycles = GPU_COVER_CYCLES
        self.threads_py = threading.active_count()
        self.children_before = _become_subreaper_and_list_children()  # None: not countable here
        self.outside_reported = 0  # host_reads.REFUSED_OUTSIDE already reported
        self.fingerprint = None  # the FingerprintWatch main() takes once the problem modules are imported
        self.outside_armed_signals_only = False
        self.threads_before_kernel: int | None = None  # self.starts.threads when the first kernel file loaded
        self.threads_in_calls = 0  # threads started inside calls (reported there)
        # the collector, taken now: off from the first kernel file on, run only after each call
        # and at the end of each request, under a watch (``_collect_garbage``)
        self.gc_collect, self.gc_enabled, self.gc_disable = gc.collect, gc.isenabled, gc.disable
        # the interpreter's own count of collections (no Python code can lower it): one the judge
        # did not make shows even when the finalizer it ran switched the collector off again
        self.gc_stats = gc.get_stats
        self.gc_collections: int | None = None  # the count after the judge's last collection
        # what the judge drops that a call could reach (its watch and launch record, the parent's
        # sets): released in ``_collect_garbage`` (``_release``), since freeing an object runs the
        # finalizers of what the kernel left in it
        self.dropped: list = []
        self.set_profile, self.get_profile = sys.setprofile, sys.getprofile

    def _new_children(self) -> dict[str, str] | None:
        """A finding for child processes of the worker's that were not there before the kernel
        file loaded: the audit hook refuses the calls that start processes, but not every way
        to one raises an audit event (``_posixsubprocess.fork_exec`` does not); the worker is
        their subreaper, so a grandchild whose parent exited is counted too."""
        if self.children_before is None or self.outside_armed_signals_only:
            return None
        now = _children()
        if now is None:
            self.children_before = None  # reported once
            return {"rule": "threads-or-streams", "message": (
                "the worker could no longer read the list of its child processes after the kernel ran: "
                "a child it started could not be seen")}
        new = now - self.children_before
        if not new:
            return None
        self.children_before |= new  # reported once
        return {"rule": "threads-or-streams", "message": (
            f"the kernel started {len(new)} process(es) that are still running: a child outlives its call "
            "and the worker, and reaches the incumbent's worker")}

    def _threads_outside_calls(self) -> dict[str, str] | None:
        """A finding for threads started since the kernel file began to load, outside its calls
        (while it loaded, or by code it left to run later): one already alive when a call begins
        is in neither the call's start count nor its live count."""
        if self.threads_before_kernel is None:
            return None
        outside = self.starts.threads - self.threads_before_kernel - self.threads_in_calls
        if outside <= 0:
            return None
        return {"rule": "threads-or-streams", "message": (
            f"the kernel started {outside} thread(s) outside its calls (while its file loaded, or later; "
            "work forked onto torch's own threads and TorchScript count): the judge's watch is per thread, "
            "and such a thread runs beside every call")}

    def _escaped(self) -> dict[str, str] | None:
        """A ``torch-op`` finding when the kernel's code used a way around the watch (``escapes.py``)
        since the last one reported."""
        if self.escapes.count == self.escapes_reported:
            return None
        self.escapes_reported = self.escapes.count
        return {"rule": "torch-op", "message": (
            f"the kernel used {', '.join(self.escapes.names[:3])}: ops under it, or with the judge's dispatch mode "
            "off torch's stack, are hidden from the watch")}

    def _outside_refused(self) -> dict[str, str] | None:
        """The finding for what the kernel tried outside its process (processes, signals, file
        writes: host_reads.arm_outside) since the last one reported."""
        found = host_reads.outside_finding(self.outside_reported)
        self.outside_reported = len(host_reads.REFUSED_OUTSIDE)
        return found

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
                # taken before any kernel file runs here: a kernel that rebinds make_inputs (or
                # what it calls: the fingerprint covers those) does not reach the draws
                self.drawers[spec] = self.problems[spec].make_inputs
                self.adversaries[spec] = self.problems[spec].adversarial_inputs
            self.problem = self.problems.get(spec) if spec else None
            self.draw_inputs = self.drawers.get(spec) if spec else None
            self.draw_adversarial = self.adversaries.get(spec) if spec else None
            if self.registered_before_kernel is None:  # problems (KernelBench files) may register ops of their own
                self.registered_before_kernel = self.registrations.count
                self.hooks_before_kernel = outside_hooks()
                self.threads_before_kernel = self.starts.threads
                if not os.environ.get(PROFILE_ENV):  # a profiled worker writes its profile (benchmarks)
                    # files may be written in the evaluation's own build dir too; where files may build
                    # native code (KernelBench --allow-torch: load_inline runs compilers and writes), only
                    # signals to other processes are refused
                    host_reads.arm_outside(tuple(message.get("writable") or ())
                                           + ((message["build_dir"],) if message.get("build_dir") else ()),
                                           signals_only=bool(message.get("native_code")))
                self.outside_armed_signals_only = bool(message.get("native_code"))  # torch.compile's workers
            self.gc_disable()
            if self.gc_collections is None:
                self.gc_collections = self._gc_collections()
            reply = self.load(message["slot"], message["path"], message.get("source"))
            found = [f for f in (self._outside_refused(), self._threads_outside_calls(), self._new_children(),
                                 self._escaped()) if f]
            found += self._names_finding(  # (a builtin shadowed: no digest shows it)
                "the kernel file left {names} rebound as it loaded: the judge's own work would run its code")
            found += self._collect_garbage()
            if found:
                reply["findings"] = found
            return reply
        if op in ("call", "collect"):
            reply = self.call(message) if op == "call" else self.collect(message)
            self.dropped.append(dict(message))  # the parent's input sets and buffers: freed under the watch
            message.clear()
            found = self._collect_garbage()
            if found and "error" not in reply:
                reply["findings"] = list(reply.get("findings") or []) + found
            return reply
        return {"error": f"unknown request {op!r}", "internal": True}

    def _gc_collections(self) -> int:
        return sum(stats["collections"] for stats in self.gc_stats())

    def _collector_outside(self, when: str) -> dict[str, str] | None:
        """A finding when the collector is on, or collected, since the judge's last collection
        (``when``: where the judge looked).  A collection that starts when allocations cross a
        threshold runs the finalizers of the objects the kernel left in reference cycles wherever
        the judge happens to be, and one of them can switch the collector off again before the
        judge asks whether it is on: the count of collections says it ran."""
        enabled = self.gc_enabled()
        if enabled:
            self.gc_disable()
        if self.gc_collections is None:  # no kernel file loaded yet: the collector is the judge's
            return None
        now = self._gc_collections()
        ran, self.gc_collections = now != self.gc_collections, now
        if not (enabled or ran):
            return None
        what = "switched the garbage collector back on" if enabled else \
            "made the garbage collector collect (switched on and off again, or called)"
        return {"rule": "monkey-patch", "message": (
            f"{when} {what}: a collection runs the finalizers of the objects the kernel left in reference "
            "cycles inside the judge's own work, after the call, untimed")}

    def _collect_garbage(self) -> list[dict[str, str]]:
        """Release what the judge dropped (``self.dropped``) and collect the young generations
        (after every call and at the end of every request), under a watch, and return findings
        for code of the kernel's that ran.  The collector is off from the first kernel file on:
        a collection that starts when allocations cross a threshold runs the finalizers of the
        reference cycles it frees (a generator's ``finally``), and a kernel that filled the
        youngest generation to its threshold before returning had its work run by the first
        container the judge's checks allocated: after the timer stopped, inside the call's launch
        record.  Freeing an object runs the finalizers of what it holds just the same: a generator
        the kernel left in the watch's own sets ran its work when the judge's call returned and
        its watch was freed."""
        found = []
        outside = self._collector_outside("the kernel")
        if outside:
            found.append(outside)
        found += self._release(self.dropped, "its watches and launch records")
        freed, ran = self._guarded(lambda: self.gc_collect(1), profiled=False)
        self.gc_collections = self._gc_collections()
        if ran:
            found.append({"rule": "monkey-patch", "message": (
                f"code of the kernel's ran when the judge collected garbage ({', '.join(ran[:4])}): a finalizer of "
                "an object it left in a reference cycle or in an object of the judge's, work done outside its calls")})
        if freed:  # no finalizer without garbage
            found += self._names_finding("a finalizer of the kernel's left {names} rebound when the judge collected "
                                         "garbage: the judge's own work would run its code")
        self._forget_shared()  # what the parent shared is released by now
        return found

    def _release(self, objects: list, what: str) -> list[dict[str, str]]:
        """Drop the judge's references to ``objects`` (the list is emptied) and return a finding
        when any Python code ran while they were freed.  Freeing tensors, watches, launch records
        and lists runs no Python at all; a finalizer the kernel left in one of them (a suspended
        generator put in a set of the watch's own) is the only Python that can run here, and
        whatever it would do, even only plant the next one, is the kernel's code outside its calls."""
        _, ran = self._guarded(objects.clear, profiled=True)
        if not ran:
            return []
        return [{"rule": "monkey-patch", "message": (
            f"code of the kernel's ran when the judge freed {what} ({', '.join(ran[:4])}): a finalizer "
            "of an object it left in the judge's objects, work done outside its calls, after the timer stopped")}]

    def _guarded(self, action, profiled: bool) -> tuple[Any, list[str]]:
        """Run ``action`` of the judge's where no code of the kernel's may run: under a watch and a
        launch record (and, with ``profiled``, a profile function, which sees Python the watch does
        not: a finalizer that only plants the next one).  Returns its result and what ran: the
        functions, the Triton launches, the torch ops."""
        ran: list = []

        def profile(frame, event, arg):
            if event == "call":
                ran.append(frame.f_code.co_name)

        # a callback with no Python frame (a C function bound with functools.partial, as a weak
        # reference's callback) raises no profile event: the watch and the launch record see its work
        watch = self.watch_cls(None)
        seen = self.watch_records(watch)
        record = self.launches.begin(None)
        # a profiled worker's profiler stays (benchmarks; a kernel's is a hook finding)
        profile_now = profiled and self.get_profile() is None
        try:
            with watch:
                if profile_now:
                    self.set_profile(profile)
                try:
                    result = action()
                finally:
                    if profile_now:
                        self.set_profile(None)
        finally:
            self.launches.end()
        launched = record.own + record.foreign
        return result, ran + ([f"{launched} Triton launch(es)"] if launched else []) + sorted(seen.ops)

    def _names_finding(self, message: str) -> list[dict[str, str]]:
        """A ``monkey-patch`` finding (``message`` with the names for ``{names}``) when a name of
        the baseline is rebound now, else none."""
        if self.fingerprint is None or self.fingerprint.held():
            return []
        return [{"rule": "monkey-patch", "message": message.format(names=self._rebound_names())}]

    def load(self, slot: str, path: str, source: str | None = None) -> dict[str, Any]:
        """Execute ``source`` (the text the parent checked; else the file) as a fresh module."""
        import types

        name = f"autokernel_candidate_{next(_module_counter)}"
        try:
            if source is None:
                with open(path) as f:
                    source = f.read()
            if self.pin_kernel_text is not None:
                self.pin_kernel_text(path, source)
            if self.add_kernel_file is not None:
                self.add_kernel_file(path)
            code = compile(source, path, "exec")
            module = types.ModuleType(name)
            module.__file__ = path
            sys.modules[name] = module
            exec(code, module.__dict__)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return {"error": describe_error(exc, [path])}
        if self.problem is not None:
            missing = self.problem.missing_entry_point(module)  # ModelNew for a KernelBench problem
        else:
            missing = None if callable(getattr(module, "kernel_fn", None)) else \
                "kernel file defines no callable kernel_fn"
        if missing:
            return {"error": missing}
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
    def _retire_kept(self, moved: list | None = None) -> tuple[list[dict[str, str]], list]:
        """Move the kept outputs to the history (held, so that their memory cannot be handed
        out again while a reused buffer could still be recognised); the findings of freeing the
        earlier inputs and the outputs the history lets go (``_release``), and the storages
        ``_memory_freed`` makes of ``moved`` once the inputs are freed, before any output is:
        where the memory is allocated again (``_landed``), an output block freed beside an input's
        would merge with it and move the block's start."""
        inputs = [self.kept_inputs]  # freed where no code may run (``_release``)
        self.kept_inputs = []
        found = self._release(inputs, "the inputs of earlier calls")
        memory = self._memory_freed(moved or [])
        budget = HISTORY_BYTES["gpu" if self.gpu else "cpu"]
        for outs, spans in zip(self.kept, self.kept_spans):
            size = sum(hi - lo for lo, hi in spans)
            self.history.append((outs, size, spans))
            self.history_bytes += size
        released = []  # freed below where no code may run (``_release``)
        self.kept = []
        self.kept_digests = []
        self.kept_spans = []
        while self.history and (len(self.history) > HISTORY_CALLS or self.history_bytes > budget):
            outs, size, _ = self.history.popleft()
            self.history_bytes -= size
            released.append(outs)
        outs = None  # no reference of this frame's may outlive the release
        return found + self._release(released, "the outputs of earlier calls"), memory

    def _spans(self, tensors) -> list[tuple[int, int]]:
        """The memory ranges of the storages of ``tensors`` (taken once: the checks below compare
        numbers, not tensors)."""
        torch = self.torch
        spans = []
        for t in tensors:
            if type(t) is torch.Tensor and t.layout == torch.strided and numel(t) > 0:
                spans.append(span(t))
        return spans

    def call(self, m: dict[str, Any]) -> dict[str, Any]:
        """The kernel called ``calls`` times on each of the parent's ``sets``, or once on each
        set this process draws itself from the parent's ``draw`` seeds (timed calls), each one
        right before its own call (``_draw``).  The parent's sets come sealed (stages.seal):
        each is opened right before its first call, copied into memory of this process's and
        closed again (``_copied``; a later call on the same set gets a copy of what the call
        before it left), and the parent's output buffers and its own sets are opened only once
        every call is made (``_after_calls``).  So while a call runs the kernel holds tensors
        this process just made, and none of the parent's memory is mapped here, whichever kind
        of request it is: nothing tells a parent's set from a drawn one."""
        slot = m.get("slot", "candidate")
        paths = [self.paths.get(slot, "")]
        self.draw_findings = []  # (what ``_made`` finds as the memory moves)
        moved = self._made(self._take_inputs_memory) if m.get("in_place") and m.get("draw") is None else []
        moving = self.draw_findings
        # per set: the storages whose memory its copy takes, where the old tensors are gone
        retired, memory = self._retire_kept(moved)
        retired += moving
        sealed = list(m.get("sets") or [])
        memory = memory[:len(sealed)]
        del moved
        after = m.get("after")
        calls = max(1, int(m.get("calls") or 1))
        seeds = m.get("draw")
        count = len(seeds) if seeds is not None else len(sealed) * calls
        # calls whose inputs take the memory of an earlier call's (``_previous_memory``), and which
        rewrites = rewrite_sources(m.get("rewrites"), count) if calls == 1 else {}
        expected = m.get("expected")  # [(shape, dtype name)] per output, or None
        module = self.slots.get(slot)
        own = module.__dict__ if module is not None else None
        require_launch = bool(m.get("require_launch", True))
        inputs = RequestInputs()
        times, ops, findings, bad = [], set(), retired, []
        uncovered = []
        latest: dict[int, tuple] = {}  # each parent set as the last call on it left it
        intact = [True] * len(sealed)  # no call changed the set's shapes, strides or memory
        completed = False
        try:
            if seeds is not None and self.draw_inputs is None:
                return {"error": "harness worker error: a draw request before any problem was loaded", "internal": True}
            fn = self.kernel(slot, m["shape"], m["dtype"])
            for i in range(count):
                self.draw_findings = []
                previous = None
                if i in rewrites and len(self.kept_inputs) == i:
                    args = outs = None  # this frame's last references to the previous call's set
                    previous = self._previous_memory(rewrites[i], latest)
                    inputs.released(rewrites[i])
                if seeds is not None:
                    args = self._draw(m["shape"], m["dtype"], seeds[i], previous)
                else:
                    which = i // calls
                    source = latest.get(which)
                    taken = previous
                    if source is None:
                        source, sealed[which] = sealed[which], None
                        if which < len(memory) and taken is None:
                            taken, memory[which] = memory[which], None
                    args, made = self._copied(source, taken)
                    taken = None  # its storages now hold the copies' own allocations: freed here
                    latest[which] = args
                    del source
                findings += [dict(f, call=i) for f in self.draw_findings]
                self.kept_inputs.append(args)
                inputs.add(i, self._spans(tensors_in(args)))
                gaps = self._gaps_filled(args)
                outs, timing, call_ops, call_findings = self._judged_call(fn, args, m.get("poison"), own,
                                                                           require_launch)
                call_findings += self._gaps_written(gaps)
                gaps = None
                if seeds is None and self._metadata(args) != made:
                    intact[i // calls] = False
                    call_findings.append({"rule": "modified-input", "message": (
                        "the kernel changed an input tensor's shape, strides, dtype or storage (resized it, or set it "
                        "to other memory): the judge could not compare it with the set it sent")})
                ops |= call_ops
                findings += [dict(f, call=i) for f in call_findings]
                problem = check_outputs(outs, expected, self.device) if expected is not None else None
                bad.append(problem)
                spans = self._spans(outs)
                if problem is None:
                    alias = self._aliasing(spans, inputs.held())
                    if alias:
                        findings.append({"rule": "cached-output", "message": alias, "call": i})
                self.kept.append(outs)
                self.kept_spans.append(spans)
                digest = digest_sums(outs, self._digest_host) if problem is None else None
                # the checks above ran while the GPU finished the spin and the kernel; the digest's
                # sums are read after the same synchronisation
                t_us, covered = self._call_time(timing)
                timing = None  # its events and watch records: dropped here, as when the call's frame held them
                self.kept_digests.append(digest_values(*digest) if digest is not None else None)
                times.append(t_us)
                if not covered:
                    uncovered.append(i)
                # after every call, not only at the request's end: with the collector off, cyclic
                # garbage holding a call's tensors would pile up over a timing request's calls
                findings += [dict(f, call=i) for f in self._collect_garbage()]
            completed = True
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = self._kernel_error(exc, paths)
            refused = self._outside_refused()  # the refusal the kernel met, not only the error it raised
            if refused:
                reply["findings"] = [refused]
            return reply
        finally:  # what was never opened keeps the parent's memory (and, on the CPU, a descriptor) held for us
            unopened = [b for b in sealed if b is not None] + ([] if completed or after is None else [after])
            if unopened:
                self._drop_sealed(unopened)
        reply = {"times_us": times, "ops": sorted(ops), "findings": findings, "bad": bad, "uncovered": uncovered,
                 "kind": "gpu" if self.gpu else "interpreter"}
        if after is not None:
            done = self._after_calls(after, [latest.get(k) for k in range(len(intact))], intact, count)
            findings += done.pop("findings", [])
            reply.update(done)
        return reply

    def _after_calls(self, after: bytes, latest: list, intact: list[bool], count: int) -> dict[str, Any]:
        """Once every call of the request is made: open the parent's sealed output buffers and
        sets, copy every call's outputs into the buffers (``collected``, as a collect would)
        and each set as its calls left it over the parent's set, which the parent compares with
        its snapshot (``modified-input``)."""
        opened = _unpickle_request(after)
        reply: dict[str, Any] = {}
        left = self._left_behind("the judge's copies into the parent's sets")
        if left:  # before any copy: the copies would run the kernel's code
            reply["findings"] = left
        else:
            for dst_set, src_set, whole in zip(opened["inputs"], latest, intact):
                if whole and src_set is not None:
                    for dst, src in zip(dst_set, tensors_in(src_set)):
                        self.copy_into(dst, src)
        if opened["buffers"] is not None:
            reply["collected"] = self.collect({"indices": list(range(count)), "buffers": opened["buffers"]})
        elif self.gpu:  # the copies into the parent's sets are done before it reads them
            self.torch.cuda.synchronize()
        return reply

    def _drop_sealed(self, sealed: list) -> None:
        """Open and drop sealed sets no call used (a request that ended early): the parent's
        memory is held for us until we open it (a CUDA IPC block stays in the parent's limbo,
        a CPU set's descriptor stays open in the parent's resource sharer)."""
        for blob in sealed:
            try:
                _unpickle_request(blob)
            except Exception:  # noqa: BLE001 - nothing more to release
                pass
        self._forget_shared()

    def _forget_shared(self) -> None:
        """Empty torch's cache of the storages other processes shared with this one: its entries
        outlive the parent's sets and buffers (weak references, purged only past 128 entries),
        and a kernel that counted the live ones told a request that brought the parent's sets
        from one that drew its own.  Called once nothing the parent shared is held here."""
        if self.shared_cache:
            dict.clear(self.shared_cache)

    def _gaps_filled(self, args: tuple) -> list:
        """The input tensors of a call whose storage holds bytes that are none of their elements
        (strided layouts: a slice of a packed q|k|v projection, as the model integration passes
        it, has the row's other heads between its rows), each with a copy of its storage's bytes
        after those bytes were filled with fresh values (normal ones of the dtype for floating
        tensors, as a model's other heads hold; random bytes else).  In a model those bytes are
        other tensors' (the same token's k and v): a kernel that used them as scratch passed every
        stage, the judge comparing only the elements (red-team pass 29,
        tests/attacks/attention_scratch_in_input_padding.py).  ``_gaps_written`` compares them
        after the call."""
        torch = self.torch
        base = torch._C.TensorBase
        found = []
        for t in tensors_in(args):
            if type(t) is not torch.Tensor or t.layout != torch.strided or t.is_meta or numel(t) == 0:
                continue
            size = base.element_size(t)
            storage = base.untyped_storage(t)
            total = torch._C.StorageBase.nbytes(storage)
            if size not in self.int_of_size or total % size or total <= numel(t) * size:
                continue
            raw = torch.empty(0, dtype=torch.uint8, device=t.device)
            base.set_(raw, storage, 0, (total,), (1,))
            elements = base.clone(t)
            if base.is_floating_point(t):
                flat = torch.empty(0, dtype=t.dtype, device=t.device)
                base.set_(flat, storage, 0, (total // size,), (1,))
                base.normal_(flat, generator=self.gap_rng)
                flat = None
            else:
                base.random_(raw, 0, 256, generator=self.gap_rng)
            self.copy_into(t, elements)
            elements = None
            found.append((t, raw, base.clone(raw), self._layout(t)))
        return found

    def _layout(self, t) -> tuple:
        base = self.torch._C.TensorBase
        return (base.data_ptr(t), tuple(t.shape), tuple(base.stride(t)), base.storage_offset(t), t.dtype)

    def _gaps_written(self, gaps: list) -> list[dict[str, str]]:
        """A ``modified-input`` finding when the bytes between an input's elements changed during
        the call (``_gaps_filled``), or the input was moved to other memory."""
        torch = self.torch
        base = torch._C.TensorBase
        for t, raw, before, layout in gaps:
            if self._layout(t) != layout:
                return [{"rule": "modified-input", "message": (
                    "the kernel changed an input tensor's shape, strides, offset or memory")}]
            after = base.clone(raw)
            for copy in (before, after):  # the elements' own bytes left out (``modified-input`` checks them)
                view = base.view(copy, self.int_of_size[base.element_size(t)])
                base.fill_(base.as_strided(view, tuple(t.shape), tuple(base.stride(t)), base.storage_offset(t)), 0)
            if not base.equal(before, after):
                return [{"rule": "modified-input", "message": (
                    "the kernel wrote into its input's storage between the input's elements (the spare columns "
                    "of a strided input's rows): in a model those bytes are other tensors' (a slice of a packed "
                    "q|k|v projection has the same token's k and v there)")}]
        return []

    def _metadata(self, args: tuple) -> list:
        """What each tensor of a set is made as: shape, strides, dtype and memory range."""
        torch = self.torch
        return [(tuple(t.shape), tuple(t.stride()), t.dtype, span(t) if numel(t) > 0 else None)
                for t in tensors_in(args) if type(t) is torch.Tensor]

    def _draw(self, shape: dict, dtype, seed: Any, memory: list | None = None) -> tuple:
        """One input set of the problem for ``seed``, drawn here and now: until its call comes,
        no set's values exist anywhere, so no earlier call can compute a later call's output (a
        request's sets drawn together, here or in the parent, lie in memory a kernel can reach
        by pointer arithmetic).  The parent draws the same set from the same seed for the calls
        it checks, and compares the inputs as they are after the call with its own draw.
        ``memory``: storages whose memory the set's tensors take (``_previous_memory``)."""
        def make():
            drawn = draw_set(self.draw_inputs, self.draw_adversarial, shape, dtype, self.device, seed)
            return drawn if memory is None else own_copy(drawn, self.copy_into, memory)

        return self._made(make)

    def _previous_memory(self, index: int, latest: dict) -> list:
        """For a call whose inputs are written into the memory of call ``index``'s (the call
        before it in this request: the parent's ``rewrites``, a rewritten set of
        ``problem_spec.rewritten_set``): the judge's own copy of that call's set, as the call left
        it (in host memory: ``_host_copy``), takes its place for the checks (``collect``,
        ``_after_calls``); the set's memory moves into storages of the judge's (``_take_inputs_memory``), the set itself is let go, and the
        storages whose memory nobody else holds are returned, one per tensor (``_memory_freed``).
        So the next call's inputs are new tensors at the previous call's addresses, as a model's
        next call meets them when the caching allocator hands a freed buffer out again: a result
        kept by the addresses and the scalars (which the rewritten set keeps) comes back stale
        on a call any of which may be checked, at any point of the timing (red-team pass 29: a
        memo that stayed off for the smoke stage's calls passed every stage)."""
        held = self.kept_inputs[index]
        saved = self._made(lambda: self._host_copy(held))
        moved = self._take_inputs_memory([held])
        released = [held]
        held = None
        self.kept_inputs[index] = saved
        for key in [k for k, v in latest.items() if v is released[0]]:
            latest[key] = saved
        saved = None
        self.draw_findings += self._release(released, "the previous call's inputs")
        return self._memory_freed(moved)[0] if moved else None

    def _host_copy(self, args: Any) -> Any:
        """``args`` with every tensor copied into host memory of the same strides (the judge's
        record of a set whose device memory the next call takes: no device memory is held for
        it beyond what the timing's memory plan counted)."""
        torch = self.torch
        if type(args) is torch.Tensor:
            copy = torch.empty_strided(tuple(args.shape), tuple(torch._C.TensorBase.stride(args)), dtype=args.dtype,
                                       device="cpu")
            self.copy_into(copy, args)
            return copy
        if type(args) in (tuple, list):
            return type(args)(self._host_copy(a) for a in args)
        return args

    def _take_inputs_memory(self, sets: list | None = None) -> list[list[tuple[Any, Any]]]:
        """For each call of the last request, each input tensor's memory moved into a storage of
        the judge's own (an empty one made here, which takes it: ``take_memory``), with a weak
        reference to the tensor's storage, which is left empty; ``(None, None)`` for a tensor
        with no memory.  The judge's rewrite of "the same input tensors" (``in_place`` requests:
        stages.stage_smoke) must reach the kernel at the same addresses, as a model's next call
        does where the caching allocator hands its freed buffers out again, yet in tensors made
        as every call's are: new tensor and storage objects, the old ones gone
        (``_memory_freed``).  Where this PyTorch cannot swap memory, the place of the memory
        instead (``MemoryAt``), which ``_memory_freed`` allocates again once it is freed."""
        torch = self.torch
        storage_of, nbytes = torch._C.TensorBase.untyped_storage, torch._C.StorageBase.nbytes
        moved = []
        for args in self.kept_inputs if sets is None else sets:
            row = []
            for t in tensors_in(args):
                if type(t) is torch.Tensor and t.layout == torch.strided and not t.is_meta:
                    old = storage_of(t)
                    if nbytes(old) > 0:
                        row.append((self._memory_of(old), self.storage_weak_ref(old)))
                        continue
                row.append((None, None))
            moved.append(row)
        return moved

    def _memory_of(self, old: Any) -> Any:
        """A storage of the judge's that takes ``old``'s memory, or, where this PyTorch cannot
        move memory between storages, where that memory lies."""
        torch = self.torch
        if not can_take_memory():
            return MemoryAt(torch._C.StorageBase.data_ptr(old), torch._C.StorageBase.nbytes(old), old.device)
        holder = torch._C.TensorBase.untyped_storage(torch.empty(0, dtype=torch.uint8, device=old.device))
        take_memory(holder, old)
        return holder

    def _memory_freed(self, moved: list) -> list[list[Any]]:
        """Per call of ``moved``, the storages whose memory its inputs' copies may take: where the
        old tensor's storage is gone now that the judge let it go (``_retire_kept``).  One still
        alive is held by the kernel (a model's buffer it holds is never handed out again): its
        memory goes back to it, and the copy gets fresh memory.  Without memory moves, a freed
        storage's memory is allocated again (``_landed``)."""
        out = []
        misses: list = []  # allocations that did not land, held until every storage is placed
        for row in moved:
            kept = []
            for holder, weak in row:
                if holder is not None:
                    expired = self.storage_expired(weak)
                    if isinstance(holder, MemoryAt):
                        holder = self._landed(holder, misses) if expired else None
                    else:
                        old = None if expired else self.storage_from_weak(weak)
                        if old is not None:
                            take_memory(old, holder)
                            holder = None
                        old = None
                    self.storage_free_weak(weak)
                kept.append(holder)
            out.append(kept)
        return out

    def _landed(self, at: "MemoryAt", misses: list) -> Any:
        """A storage allocated at ``at`` (memory the judge just freed), or None.  The allocator
        need not hand the freed block out first (another free block of that size, one that merged
        with the freed block): an allocation elsewhere is held in ``misses`` and the next one
        tried, ``LANDING_TRIES`` in all.  Before, without memory moves (PyTorch 2.11, the GPU
        machines'), the rewrites of "the same input tensors" met the old addresses only by chance,
        and a memo keyed on the addresses and the scalars passed every stage and the timing with
        relative_position_bias and softcap (red-team pass 30)."""
        torch = self.torch
        storage_of, data_ptr = torch._C.TensorBase.untyped_storage, torch._C.StorageBase.data_ptr
        for _ in range(LANDING_TRIES):
            try:
                storage = storage_of(torch.empty(at.nbytes, dtype=torch.uint8, device=at.device))
            except RuntimeError:  # out of memory: the copy is allocated as any other
                return None
            if data_ptr(storage) == at.ptr:
                return storage
            if at.nbytes * (len(misses) + 1) > LANDING_SPARE_BYTES:
                return None
            misses.append(storage)
        return None

    def _copied(self, source: Any, memory: list | None = None) -> tuple[tuple, list]:
        """A set for the next call, copied into fresh memory of this process's right before it,
        as a drawn set is made (``own_copy``: a new base tensor of the same strides, at the drawn
        sets' version counter), and what its tensors were made as.  ``source``: the parent's
        sealed set (opened, copied and dropped here: its memory is no longer mapped when the
        call runs), or the set as the previous call on it left it.  ``memory``: storages whose
        memory the copies take, one per tensor or None (``_take_inputs_memory``)."""
        def make():
            sent = _unpickle_request(source) if isinstance(source, bytes) else source
            args = own_copy(sent, self.copy_into, memory)
            if self.gpu and sent is not source:  # the copy has read the parent's memory before it is closed
                self.torch.cuda.synchronize()
            return args

        args = self._made(make)
        if isinstance(source, bytes):
            self._forget_shared()
        return args, self._metadata(args)

    def _made(self, make) -> tuple:
        """A call's input set from ``make`` (a draw, or a copy of the parent's set), made where no
        code the kernel left behind may run: a rebound name, a hook, a registration or a Triton
        launch then is a finding (``draw_findings``)."""
        # the names first: the hooks check below calls a function of torch's Python, looked up by name
        self.draw_findings += self._names_finding(
            "{names} rebound when the judge made a call's inputs: the draw or copy would run the kernel's code")
        self.draw_findings += self._left_behind("the judge's draw or copy of a call's inputs")
        record = self.launches.begin(None)
        try:
            args = make()
        finally:
            self.launches.end()
        if record.own or record.foreign:
            self.draw_findings.append({"rule": "monkey-patch", "message": (
                f"{record.own + record.foreign} Triton launch(es) while the judge made a call's inputs: code the "
                "kernel left behind ran outside its call")})
        return args

    def _left_behind(self, work: str) -> list[dict[str, str]]:
        """Findings for code of the kernel's that the judge's own ``work`` would run: hooks that
        differ from before the kernel file loaded, operator registrations made since."""
        found = []
        hooks = self._hooks_since_load()
        if hooks:
            found.append({"rule": "monkey-patch", "message": f"{hooks} left in place by the kernel: {work} would run it"})
        registered = self._registered()
        if registered:
            found.append(registered)
        return found

    def _hooks_since_load(self, now: dict | None = None) -> str | None:
        """The hooks that differ from before the kernel file loaded (one its import left in
        place is the same before and after every call)."""
        if self.hooks_before_kernel is None:
            return None
        return changed_hooks(self.hooks_before_kernel, outside_hooks() if now is None else now)

    def _registered(self) -> dict[str, str] | None:
        """A finding when PyTorch operators got implementations registered since the kernel
        file began to load (``registrations.py``)."""
        what = self.registrations.since(self.registered_before_kernel if self.registered_before_kernel is not None
                                        else self.registrations.count)
        if what is None:
            return None
        return {"rule": "monkey-patch", "message": (
            f"the kernel registered implementations of PyTorch operators ({what}, through torch.library or "
            "the like): the judge's own tensor work (draws, digests, copies into the parent's buffers) would "
            "run its code")}

    def _judged_call(self, fn, args, poison, own_globals, require_launch):
        """One call of the kernel, the same for every call the worker makes.  Returns its outputs,
        its timing (``_call_time`` reads it: on a GPU the call's events, read once the checks
        after the call are done, so the GPU finishes the spin and the kernel while they run), the
        ops it called and its findings."""
        torch = self.torch
        watch = self.watch_cls(poison, timed_fills=self.gpu, flush=self._flush)
        seen = self.watch_records(watch)  # what the judge reads of the watch: out of the kernel's reach
        record = self.launches.begin(own_globals, launches.current_stream_handle() if self.gpu else None)
        py_before = self.threading.active_count()
        threads_started, streams_made = self.starts.threads, self.starts.streams
        if self.gpu:
            stream = torch.cuda.current_stream()  # the one the judge times
            seen.stream = stream
            cover, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            self._flush.zero_()
            self.record_event(cover, stream)
            host_from = self.clock()
            if self._gpu_sleep is not None:
                self._gpu_sleep(self.cover_cycles)
            self.record_event(start, stream)
        hooks_before = outside_hooks()
        t0 = self.clock()
        try:
            with watch:
                raw = fn(*args)
                # the timed window ends as the kernel returns (C functions taken before any kernel:
                # nothing of the kernel's can run here) ...
                if self.gpu:
                    host_us = (self.clock() - host_from) * 1e6
                    self.record_event(end, stream)
                else:
                    t_us = (self.clock() - t0) * 1e6
                # ... and then, first of all: every check after this one looks names up (torch._C,
                # __import__...), and a name the call left rebound would run its code there, unwatched
                held = self.fingerprint is None or self.fingerprint.held()
                rebound = None if held else self._rebound_names()  # named now, before one puts itself back
                mode_problem = self.watch_in_charge(watch)
        finally:
            self.launches.end()
            self.dropped.append((watch, record))  # the kernel could reach both: freed under a watch
        hooks_left = changed_hooks(hooks_before, outside_hooks())
        hooks_loaded = None if hooks_left else self._hooks_since_load(hooks_before)
        timing = (cover, start, end, host_us, seen) if self.gpu else t_us
        outs = raw if type(raw) is tuple else (tuple(raw) if type(raw) is list else (raw,))
        findings = []
        if not held:
            findings.append({"rule": "monkey-patch", "message": (
                f"the call left {rebound} rebound: the judge's own work after it (its checks, digests, the "
                "next call's draw) would run the kernel's code, unwatched and untimed")})
        planted_on = planted(list(outs) + tensors_in(args)) or (
            f"a tensor that {seen.planted[0]} returned" if seen.planted else None)
        if planted_on:
            findings.append({"rule": "monkey-patch", "message": (
                f"the kernel set attributes on tensors of the call ({planted_on}): the judge's own work (the "
                "watch, the checks after the call) would find them before the class's methods and run its code "
                "unwatched and untimed")})
        shadowed = self.tensor_guard.changes()
        if shadowed:
            findings.append({"rule": "monkey-patch", "message": (
                f"the kernel changed torch.Tensor or the classes the judge's work calls through ({', '.join(shadowed[:5])}): "
                "the judge's own tensor work would run its code")})
        if mode_problem:
            findings.append({"rule": "torch-op", "message": mode_problem})
        if seen.tampered:
            findings.append({"rule": "monkey-patch", "message": (
                f"the kernel changed how the watch calls PyTorch ops ({seen.tampered[0]}) during its call: the "
                "watch would run its code with the watch off")})
        registered = self._registered()
        if registered:
            findings.append(registered)
        if hooks_left or hooks_loaded:
            findings.append({"rule": "monkey-patch", "message": (
                (f"the call left {hooks_left} in place" if hooks_left else
                 f"the kernel file set {hooks_loaded} (not there before it loaded)")
                + ": code of the kernel's would run outside its call, in the judge's own work")})
        for found in (self._outside_refused(), self._new_children(), self._escaped()):
            if found:
                findings.append(found)
        host_read = host_reads.finding(record.host_reads) if require_launch else None
        if host_read:
            findings.append(host_read)
        if record.off_stream:
            findings.append({"rule": "threads-or-streams", "message": (
                f"{record.off_stream} Triton launch(es) ran on a CUDA stream other than the one the judge times")})
        if record.odd_argument:
            findings.append({"rule": "foreign-compute", "message": (
                f"a Triton kernel was launched with {record.odd_argument}: launch arguments must be "
                "tensors, numbers, dtypes or Triton objects")})
        collector = self._collector_outside("the call")
        if collector:
            findings.append(collector)
        extra_py = self.threading.active_count() - max(py_before, self.threads_py)
        self.threads_in_calls += self.starts.threads - threads_started
        outside = self._threads_outside_calls()
        if outside:
            findings.append(outside)
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
                   and numel(o) > 0]
        for i, o in enumerate(tensors):
            ptr = span(o)[0]
            if ptr not in seen.allocated:
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
        return outs, timing, seen.ops, findings

    def _call_time(self, timing) -> tuple[float, bool]:
        """A judged call's time and whether the GPU spin covered the host's work (always on the
        CPU).  On a GPU this is the call's one host synchronisation: it waits for the spin, the
        cache flush and the kernel's work, and reads the events."""
        if not self.gpu:
            return float(timing), True
        cover, start, end, host_us, seen = timing
        self.torch.cuda.synchronize()
        t_us = self.elapsed(start, end) * 1000.0 - seen.fill_us()
        spin_us = self.elapsed(cover, start) * 1000.0
        self.cover_cycles = next_cover_cycles(self.cover_cycles, spin_us, host_us)
        return float(t_us), host_covered(host_us, spin_us)

    def _rebound_names(self) -> str:
        try:
            return ", ".join(self.fingerprint.changed_names()[:4]) or "a module in sys.modules"
        except Exception:
            return "names it cannot read"

    def _aliasing(self, spans: list[tuple[int, int]], inputs: list[tuple[int, int]]) -> str | None:
        """Does an output (its storage's range in ``spans``) share memory with another output,
        an input of the request, or the output of an earlier call still held?"""
        for a, (lo, hi) in enumerate(spans):
            for b, (lo2, hi2) in enumerate(spans[:a]):
                if lo < hi2 and lo2 < hi:
                    return f"outputs {b} and {a} share memory"

        def overlaps(others: list[tuple[int, int]], what: str) -> str | None:
            for lo2, hi2 in others:
                for i, (lo, hi) in enumerate(spans):
                    if lo < hi2 and lo2 < hi:
                        return f"output {i} shares memory with {what}"
            return None

        found = overlaps(inputs, "an input")
        if found:
            return found
        for earlier in list(self.kept_spans) + [spans_ for _, _, spans_ in self.history]:
            found = overlaps(earlier, "the output of an earlier call")
            if found:
                return found
        return None

    def collect(self, m: dict[str, Any]) -> dict[str, Any]:
        """Copy the kept outputs of the calls ``m["indices"]`` into the parent's buffers (a
        ``collect`` request, or the end of a ``call`` request that brought buffers for every call);
        with ``input_buffers``, also the tensors of the input sets drawn for those calls, as
        they are now."""
        done, findings = [], []
        left = self._left_behind("the judge's copies into the parent's buffers")
        if left:  # before any copy: the copies would run the kernel's code
            return {"bad": [None] * len(m["indices"]), "findings": left}
        input_buffers = m.get("input_buffers")
        for n, (index, buffers) in enumerate(zip(m["indices"], m["buffers"])):
            outs = self.kept[int(index)]
            problem = check_outputs(outs, [(tuple(b.shape), str(b.dtype)) for b in buffers], self.device)
            if problem is None and self.kept_digests[int(index)] != output_digest(outs):
                findings.append({"rule": "deferred-write", "call": int(index), "message": (
                    "an output changed after its call returned: written later (by another call of the "
                    "request), so the call it belongs to did not do its work in its own time")})
            if problem is None:
                for dst, src in zip(buffers, outs):
                    self.copy_into(dst, src)
            if input_buffers is not None:
                drawn = tensors_in(self.kept_inputs[int(index)]) if int(index) < len(self.kept_inputs) else []
                same = len(drawn) == len(input_buffers[n]) and all(
                    tuple(dst.shape) == tuple(src.shape) and dst.dtype == src.dtype
                    for dst, src in zip(input_buffers[n], drawn))
                if same:
                    for dst, src in zip(input_buffers[n], drawn):
                        self.copy_into(dst, src)
                else:  # no copy would leave the judge's own draw to be compared with itself
                    findings.append({"rule": "modified-input", "call": int(index), "message": (
                        "the inputs of the call are not tensors of the shapes and dtypes the judge drew: "
                        "drawn otherwise")})
            done.append(problem)
        if self.gpu:
            self.torch.cuda.synchronize()
        return {"bad": done, "findings": findings}

    def _kernel_error(self, exc: BaseException, paths: list[str]) -> dict[str, Any]:
        return {"error": describe_error(exc, paths), "cuda_fault": is_cuda_fault(exc)}



def _children_file() -> str:
    return f"/proc/{os.getpid()}/task/{os.getpid()}/children"


_CHILDREN_FD: list[int] = []  # the children file, opened once before any kernel loads


def _children() -> set[int] | None:
    """This process's children now; None when they cannot be read.  Read through a descriptor
    opened before any kernel loaded: a kernel that took every descriptor the process may open
    would otherwise have each later open fail, and a failed read count no child."""
    try:
        if not _CHILDREN_FD:
            _CHILDREN_FD.append(os.open(_children_file(), os.O_RDONLY))
        data, chunk = b"", 1 << 16
        while True:
            part = os.pread(_CHILDREN_FD[0], chunk, len(data))
            data += part
            if len(part) < chunk:
                break
        return {int(pid) for pid in data.split()}
    except (OSError, ValueError):
        return None


def _become_subreaper_and_list_children() -> set[int] | None:
    """Make this process the subreaper of its descendants (Linux: orphans are reparented to it,
    so a double fork stays countable) and list its children now; None where the kernel does not
    list children."""
    if not os.path.exists(_children_file()):
        return None
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass
    return _children()  # None where it cannot be read even now


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
