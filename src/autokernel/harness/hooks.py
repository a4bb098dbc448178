"""What would run a kernel's code outside its own call, in the worker (``outside_hooks``):
dispatch and function modes left on torch's stacks, profile and trace functions, garbage
collector callbacks, ``torch.nn``'s global module hooks (a KernelBench draw builds the reference
``Model``: a registration hook runs inside it), the hooks for warnings and uncaught or
unraisable exceptions, and what those write through: ``sys.stdout``/``sys.stderr`` (the default
hooks are the judge's, but they write to whatever ``sys.stderr`` is: an object of the kernel's
there, with ``warnings.simplefilter("always")``, ran its ``write`` whenever the judge's work
warned).  The warning filters themselves are not compared: libraries add filters as their
modules import, which a kernel's first launch on a GPU can do, and a filter alone writes
nothing the stream check does not cover.  The worker takes them before the kernel file loads and before and after
every call; a call that leaves one behind, or a file that set one at import, is tampering
(``changed_hooks``): the judge's own work (drawing the next call's inputs, digests, copies into
the parent's buffers) would run the kernel's code, unwatched and untimed."""
from __future__ import annotations

import _signal
import gc
import operator
import signal
import sys
import threading
import warnings
from collections import OrderedDict
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


# torch.nn.modules.module's global hook tables, (name, the dict itself), taken at the first check,
# before any kernel file loads (the worker's first ``outside_hooks`` comes before the first load)
_TABLES: list[tuple[str, dict]] = []
_DICT_ITEMS = dict.items  # the C function: a table's (or its class's) own ``items``/``__iter__`` never runs


def _module_hooks() -> tuple:
    """For every global hook table of ``torch.nn.modules.module`` (``_global_*``): whether its name
    still holds the table taken at the first check, and its (key, hook) pairs.  A table is a dict,
    no callable, so no name check compares it: ``tuple(table)`` of whatever the name held ran the
    ``__iter__`` of a dict of the kernel's class bound there, in this check right after each call
    (the row sums computed there, untimed and unwatched: tests/attacks/reduce_hook_table_iter.py)."""
    module = sys.modules.get("torch.nn.modules.module")
    if module is None:
        return ()
    space = vars(module)
    if not _TABLES:
        _TABLES.extend(sorted(((n, t) for n, t in space.items() if n.startswith("_global_") and type(t) in
                               (dict, OrderedDict)), key=lambda item: item[0]))
    return tuple((name, space.get(name) is table, tuple(_DICT_ITEMS(table))) for name, table in _TABLES)


def outside_hooks() -> dict[str, Any]:
    """The hooks as objects (compared by identity in ``changed_hooks``, never by ``==``, which
    would call a hook's own ``__eq__``; never by ``id()`` either: each ``id()`` call is an audit
    event that runs the worker's audit hook, ~70 of them here, three times a call)."""
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    if not _LEN_FUNCTION_STACK:
        _LEN_FUNCTION_STACK.append(torch._C._len_torch_function_stack)
    return {"a torch.nn global module hook": _module_hooks(),
            "a warning or exception hook": (warnings.showwarning, warnings.formatwarning, sys.excepthook,
                                            sys.unraisablehook, threading.excepthook),
            "sys.stdout or sys.stderr": (sys.stdout, sys.stderr),
            "a dispatch mode": tuple(_get_current_dispatch_mode_stack()),
            "a torch function mode": _LEN_FUNCTION_STACK[0](),
            "a profile function": _GETPROFILE(), "a trace function": _GETTRACE(),
            "a thread profile function": _THREAD_GETPROFILE(),
            "a thread trace function": _THREAD_GETTRACE(),
            "a garbage collector callback": tuple(_GC_CALLBACKS),
            "a sys.monitoring tool": _monitoring_tools(),
            "a signal handler or interval timer": _signals(),
            "an import hook": tuple(sys.meta_path) + tuple(sys.path_hooks),
            "an audit hook": len(host_reads.REFUSED_AUDIT_HOOKS)}


def _signals() -> tuple:
    """Every signal's handler and the interval timers (a timer's handler runs between any two
    bytecodes of the judge's work, with the frame it interrupted)."""
    # two tuples: the handlers are the same objects from one reading to the next (compared in one
    # pass), the timers fresh tuples of numbers
    return tuple(map(_GETSIGNAL, _SIGNALS)), tuple(map(_GETITIMER, _TIMERS))


def _monitoring_tools() -> tuple:
    """The sys.monitoring tools in use and their global events (Python 3.12+; else empty)."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return ()
    tools = [(i, monitoring.get_tool(i)) for i in range(6)]
    return tuple((name, monitoring.get_events(i)) for i, name in tools if name is not None)


_LEN_FUNCTION_STACK: list = []  # torch._C's, taken at the first check (before any kernel file loads)
_PLAIN = (int, float, str, bool, type(None))
_IS = operator.is_


def same(a: Any, b: Any) -> bool:
    """Identity for objects, equality only for plain numbers and strings of exactly those types,
    elementwise through tuples: no method of an object a kernel made runs here."""
    if a is b:  # (a tuple too: identity is sameness all the way down; most readings are of the same tuples)
        return True
    if type(a) is tuple:
        # a fresh tuple of the same objects (each snapshot builds its own): their identities in C first
        return type(b) is tuple and len(a) == len(b) and (all(map(_IS, a, b)) or all(map(same, a, b)))
    return type(a) in _PLAIN and type(b) is type(a) and a == b


def changed_hooks(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """The hooks that differ, named, or None."""
    changed = [name for name in before if not same(before[name], after.get(name))]
    return " and ".join(changed) if changed else None
