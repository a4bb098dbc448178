"""Tensor values reaching Python during a kernel call (worker side).

A kernel file that reads tensor values into Python can compute its result there (``math.exp``
on ``.item()`` scalars, sums of ``tolist()`` rows, bytes read back from its own memory) and
hand it to a Triton kernel of its own that merely stores or rewrites it: the output then passed
through the file's kernel and every op the watch saw was allowed.  The cause is the read, so
the read is the finding: nothing a call does may carry tensor values into Python.

Three layers, all noting into the launch record's current call (``LaunchRecord.note_host_read``)
and all silent outside judged calls and inside the real Triton interpreter's own frames (the
interpreter reads its arguments on the kernel's behalf):

- the watch (watch.py) notes ``aten._local_scalar_dense``: ``.item()``, ``float(t)``,
  ``int(t)``, ``bool(t)``, formatting a scalar, iterating down to scalars, ``storage[i]``;
- ``install`` wraps the reads that never reach the dispatcher: ``Tensor.tolist``, ``numpy``,
  ``__array__``, ``__dlpack__``, ``__repr__`` (printing), ``__reduce_ex__`` (pickling),
  ``torch.save``, and the storage methods that write or share raw bytes;
- an audit hook (``sys.addaudithook``; it cannot be removed) notes opening the process's memory
  or shared-memory files (``/proc/<pid>/mem``, ``/dev/shm``...), ``mmap`` and the ctypes calls
  that read raw memory; it refuses every audit hook added after it (a kernel's hook would run
  on the judge's events, and receive the frames of the watch's ``sys._getframe`` calls).

The wrapped methods are installed before the worker's fingerprint is taken, so replacing them
is ``monkey-patch``.
"""
from __future__ import annotations

import os
import sys
from typing import Any

# Paths whose contents are this process's memory or the shared memory inputs live in: /proc
# entries by their name (a file ``mem`` or ``pagemap``, anything under ``map_files`` or ``fd``),
# and /dev/shm, /dev/mem, /dev/fd.  File descriptor numbers do not count: Triton's compiler
# opens its subprocess pipes by number inside the first launch of a shape.
PROC_MEMORY_NAMES = ("mem", "pagemap")
PROC_MEMORY_DIRS = ("map_files", "fd")
DEV_MEMORY_PREFIXES = ("/dev/shm/", "/dev/mem", "/dev/fd/")
MEMORY_AUDIT_EVENTS = ("mmap.__new__", "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata",
                       "ctypes.cdata/buffer", "ctypes.PyObj_FromPtr")

_INSTALLED = False
REFUSED_AUDIT_HOOKS: list[str] = []  # sys.addaudithook calls after ``install`` (refused; the worker reports them)

# Processes started and signals sent to other processes: a child outlives the call, the request
# and the worker itself, unwatched, and a signal reaches the incumbent's worker (a child made
# with pty.fork at import stopped it with SIGSTOP half of every 20 ms: the incumbent ran at half
# speed and a candidate no faster than it won keep/revert, the parent's wall clock agreeing).
PROCESS_EVENTS = ("os.fork", "os.forkpty", "os.system", "os.exec", "os.spawn", "os.posix_spawn",
                  "subprocess.Popen", "os.kill", "os.killpg")
REFUSED_PROCESSES: list[str] = []  # what was refused since ``arm_processes`` (the worker reports them)
_PROCESS_RULE: dict[str, Any] = {"armed": False, "compiler": frozenset()}


def arm_processes() -> None:
    """From now on (the worker calls this before a kernel file loads, unless the problem lets
    files build native code) refuse new processes and signals to other processes, except the
    child processes Triton's own compiler starts (ptxas, the launcher's C build on a GPU: a
    frame of ``triton.compiler.compiler`` on the stack)."""
    from . import launches

    _PROCESS_RULE["compiler"] = launches.module_code_objects("triton.compiler.compiler")
    _PROCESS_RULE["armed"] = True


def _process_refused(event: str, args: tuple, frame) -> str | None:
    """What is refused about ``event``, or None when it is allowed."""
    if event in ("os.kill", "os.killpg"):
        target, sig = (args + (None, None))[:2]
        if sig == 0 or (event == "os.kill" and target == os.getpid()):
            return None
        return f"{event}({target}, {sig}): a signal to another process"
    compiler = _PROCESS_RULE["compiler"]
    while frame is not None:
        if frame.f_code in compiler:
            return None
        frame = frame.f_back
    what = args[0] if args else ""
    return f"{event} ({what!r:.80}): a new process"


def memory_path(path: Any) -> bool:
    """Is opening ``path`` a way to read raw memory (a /proc memory file, shared memory)?"""
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False
    text = os.fsdecode(path)
    try:
        resolved = os.path.realpath(text)  # a symlink to /proc/self/mem is /proc/self/mem
    except (OSError, ValueError):
        resolved = text
    return any(_memory_file(os.path.normpath(p)) for p in (text, resolved))


def _memory_file(text: str) -> bool:
    if text.startswith(DEV_MEMORY_PREFIXES) or text == "/dev/shm":
        return True
    parts = text.split("/")
    return (len(parts) > 2 and parts[1] == "proc"
            and (parts[-1] in PROC_MEMORY_NAMES or any(d in parts[2:-1] for d in PROC_MEMORY_DIRS)))


def install(record, skipped_files: tuple[str, ...]) -> None:
    """Wrap the non-dispatch reads and add the audit hook (once per process)."""
    global _INSTALLED
    if _INSTALLED:
        return
    import torch

    from . import launches

    skipped = (os.path.dirname(torch.__file__), __file__) + tuple(skipped_files)
    by_interpreter = launches.interpreter_frame_test(record, skipped)

    def note(what: str, frame) -> None:
        if record.current is not None and not by_interpreter(frame):
            record.note_host_read(what)

    def guard(owner: Any, name: str, what: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        def guarded(*args, **kwargs):
            note(what, sys._getframe(1))
            return original(*args, **kwargs)

        # no functools.wraps: its ``__wrapped__`` would hand out the unguarded original
        guarded.__name__, guarded.__qualname__, guarded.__doc__ = name, f"guarded {name}", original.__doc__
        setattr(owner, name, guarded)

    tensor_reads: dict[str, str] = {
        "tolist": "Tensor.tolist()", "numpy": "Tensor.numpy()", "__array__": "numpy conversion (__array__)",
        "__dlpack__": "DLPack export (__dlpack__)", "__repr__": "printing or formatting a tensor (__repr__)",
        "__reduce_ex__": "pickling a tensor (__reduce_ex__)",
    }
    for name, what in tensor_reads.items():
        guard(torch.Tensor, name, what)
    for name in ("__reduce__", "_write_file", "_share_filename_cpu_", "_share_fd_cpu_", "_shared_incref",
                 "_new_shared_fd_cpu", "_new_shared_filename_cpu", "share_memory_", "tolist"):
        guard(torch.UntypedStorage, name, f"storage.{name}")
    import torch.serialization

    guard(torch, "save", "torch.save")
    guard(torch.serialization, "save", "torch.save")
    guard(torch.serialization, "_save", "torch.save")

    def audit(event: str, args: tuple) -> None:
        if event == "sys.addaudithook":  # a hook of the kernel's would see every frame the watch takes
            REFUSED_AUDIT_HOOKS.append(event)
            raise RuntimeError("no audit hooks after the judge's own")  # Python then does not add it
        if event in PROCESS_EVENTS and _PROCESS_RULE["armed"]:
            refused = _process_refused(event, args, sys._getframe(1))
            if refused:
                REFUSED_PROCESSES.append(refused)
                raise RuntimeError(f"refused by the judge: {refused}")
        if record.current is None:
            return
        if event == "open" and args and memory_path(args[0]):
            note(f"opening {args[0]!r} (raw memory)", sys._getframe(1))
        elif event in MEMORY_AUDIT_EVENTS:
            note(f"{event} (raw memory)", sys._getframe(1))

    sys.addaudithook(audit)
    _INSTALLED = True


def process_finding(since: int) -> dict[str, str] | None:
    """The ``threads-or-streams`` finding for processes refused after the first ``since``."""
    refused = REFUSED_PROCESSES[since:]
    if not refused:
        return None
    return {"rule": "threads-or-streams", "message": (
        "the kernel started a process or signalled another one (" + "; ".join(refused[:3]) + "; refused): "
        "a child outlives its call and the worker, and reaches the incumbent's worker")}


def finding(host_reads: list[str]) -> dict[str, str] | None:
    """The ``foreign-compute`` finding for a call that read tensor values into Python."""
    if not host_reads:
        return None
    return {"rule": "foreign-compute", "message": (
        "the call read tensor values into Python (" + "; ".join(host_reads[:3])
        + "): a kernel's result must be computed by its Triton kernels, never on the host")}
