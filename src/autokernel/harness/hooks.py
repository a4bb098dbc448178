"""What would run a kernel's code outside its own call, in the worker (``outside_hooks``):
dispatch and function modes left on torch's stacks, profile and trace functions, garbage
collector callbacks, ``torch.nn``'s global module hooks (a KernelBench draw builds the reference
``Model``: a registration hook runs inside it), the hooks for warnings and uncaught or
unraisable exceptions.  The worker takes them before the kernel file loads and before and after
every call; a call that leaves one behind, or a file that set one at import, is tampering
(``changed_hooks``): the judge's own work (drawing the next call's inputs, digests, copies into
the parent's buffers) would run the kernel's code, unwatched and untimed."""
from __future__ import annotations

import _signal
import gc
import signal
import sys
import threading
import warnings
from typing import Any

from . import host_reads

# taken when the harness loads, before any kernel: a kernel that rebinds sys.getprofile or
# gc.callbacks in its module does not change what is read here
_GC_CALLBACKS = gc.callbacks
_GETPROFILE, _GETTRACE = sys.getprofile, sys.gettrace
_THREAD_GETPROFILE = getattr(threading, "getprofile", lambda: None)
_THREAD_GETTRACE = getattr(threading, "gettrace", lambda: None)
_GETSIGNAL, _GETITIMER = _signal.getsignal, _signal.getitimer  # the C functions: no enum conversions
_SIGNALS = sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})
_TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)


_TABLES: list[str] = []  # the names of torch.nn.modules.module's global hook tables, found once


def _module_hooks() -> tuple:
    """The keys of every global hook table of ``torch.nn.modules.module`` (``_global_*``)."""
    module = sys.modules.get("torch.nn.modules.module")
    if module is None:
        return ()
    space = vars(module)
    if not _TABLES:
        _TABLES.extend(sorted(n for n, t in space.items() if n.startswith("_global_") and isinstance(t, dict)))
    return tuple((name, tuple(space.get(name) or ())) for name in _TABLES)


def outside_hooks() -> dict[str, Any]:
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return {"a torch.nn global module hook": _module_hooks(),
            "a warning or exception hook": (id(warnings.showwarning), id(warnings.formatwarning), id(sys.excepthook),
                                            id(sys.unraisablehook), id(threading.excepthook)),
            "a dispatch mode": tuple(id(m) for m in _get_current_dispatch_mode_stack()),
            "a torch function mode": torch._C._len_torch_function_stack(),
            "a profile function": id(_GETPROFILE()), "a trace function": id(_GETTRACE()),
            "a thread profile function": id(_THREAD_GETPROFILE()),
            "a thread trace function": id(_THREAD_GETTRACE()),
            "a garbage collector callback": tuple(id(c) for c in _GC_CALLBACKS),
            "a sys.monitoring tool": _monitoring_tools(),
            "a signal handler or interval timer": _signals(),
            "an import hook": tuple(id(h) for h in sys.meta_path) + tuple(id(h) for h in sys.path_hooks),
            "an audit hook": len(host_reads.REFUSED_AUDIT_HOOKS)}


def _signals() -> tuple:
    """Every signal's handler and the interval timers (a timer's handler runs between any two
    bytecodes of the judge's work, with the frame it interrupted)."""
    handlers = tuple(id(_GETSIGNAL(s)) for s in _SIGNALS)
    return handlers + tuple(_GETITIMER(t) for t in _TIMERS)


def _monitoring_tools() -> tuple:
    """The sys.monitoring tools in use and their global events (Python 3.12+; else empty)."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return ()
    tools = [(i, monitoring.get_tool(i)) for i in range(6)]
    return tuple((name, monitoring.get_events(i)) for i, name in tools if name is not None)


def changed_hooks(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """The hooks that differ, named, or None."""
    changed = [name for name in before if before[name] != after.get(name)]
    return " and ".join(changed) if changed else None
