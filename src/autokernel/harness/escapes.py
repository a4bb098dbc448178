"""The ways around the judge's dispatch mode, counted where they are used (worker side).

The watch (watch.py) sees an op only while torch dispatches to the Python key.  A thread-local
guard that excludes that key, or the mode taken off torch's stack and pushed back without being
entered, hides every op in between, and leaves nothing for the checks after the call to see once
it is undone.  The static rules refuse these names, but a name is reached by a string in more
ways than a list can hold: ``torch.fx.Interpreter``'s ``fetch_attr`` and ``call_method`` (public,
no static finding) handed a file ``torch._C._DisableTorchDispatch`` by two strings, and it ran
``torch.softmax`` under it (no Triton compute, passed, 4.8x the starter, kept).  So each escape is
wrapped where torch keeps it, before any kernel loads (the fingerprint then covers the wrappers),
and a use asked for by the kernel's code counts: the first frame up the stack that is the kernel
file's code or the judge's own decides.  Torch's own
uses inside the judge's work (the watch's entry pushes it on torch's stack) do not count.
"""
from __future__ import annotations

import os
import sys
from typing import Any

# torch._C's guards and functions that hide ops from a dispatch mode (checked: an op under each is
# not seen by a mode on the stack), or take the mode off torch's stack and put it back unentered
ESCAPES = ("_DisableTorchDispatch", "_ExcludeDispatchKeyGuard", "_ForceDispatchKeyGuard", "_SetExcludeDispatchKeyGuard",
           "_RestorePythonTLSSnapshot", "_dispatch_tls_set_dispatch_key_excluded", "_pop_torch_dispatch_stack",
           "_push_on_torch_dispatch_stack", "_set_dispatch_mode", "_unset_dispatch_mode")


class EscapeCounter:
    """How often, and which, escapes the kernel's code used since ``install``."""

    def __init__(self) -> None:
        self.count = 0
        self.names: list[str] = []


_COUNTER: EscapeCounter | None = None


def install() -> EscapeCounter:
    """Wrap every escape in ``torch._C`` and in every torch module that imported it by name
    (``torch.utils._python_dispatch`` holds ``_pop_torch_dispatch_stack`` as its own global)."""
    global _COUNTER
    if _COUNTER is not None:
        return _COUNTER
    import torch

    from .host_reads import TrustedCode

    counter = EscapeCounter()
    installed = TrustedCode(packages=True)
    judge = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")
    getframe = sys._getframe

    # each code object's kind, decided once (the judge's watch enters and exits through two of the
    # escapes at every call: a walk of dictionary lookups, about a microsecond)
    JUDGE, KERNEL, OTHER = 0, 1, 2
    kinds: dict = {}

    kernel_files: set[str] = set()  # the names kernel files' code is compiled under (the worker's load)

    def kind_of(code) -> int:
        # by identity (code objects compare by value, not by file): the code is held, its id never reused
        found = kinds.get(id(code))
        if found is None or found[0] is not code:
            name = code.co_filename
            # (code the judge compiles from text, a KernelBench problem's module, is neither)
            found = kinds[id(code)] = (code, KERNEL if name in kernel_files else
                                       JUDGE if name.startswith(judge) and installed(code) else OTHER)
        return found[1]

    def asked_by_kernel(frame) -> bool:
        while frame is not None:
            found = kind_of(frame.f_code)
            if found != OTHER:
                return found == KERNEL
            frame = frame.f_back
        return False

    def wrap(name: str, original: Any):
        def escape(*args, **kwargs):
            if asked_by_kernel(getframe(1)):
                counter.count += 1
                if name not in counter.names:
                    counter.names.append(name)
            return original(*args, **kwargs)

        escape.__name__ = escape.__qualname__ = name
        return escape

    wrapped = {}
    for name in ESCAPES:
        original = vars(torch._C).get(name)
        if original is not None:
            wrapped[id(original)] = (original, wrap(name, original))
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "torch" or module_name.startswith("torch.")):
            continue
        space = getattr(module, "__dict__", None)
        if type(space) is not dict:
            continue
        for key, value in list(space.items()):
            entry = wrapped.get(id(value))
            if entry is not None and entry[0] is value:
                space[key] = entry[1]
    _ADD_KERNEL_FILE.append(kernel_files.add)
    _COUNTER = counter
    return counter


# the function that names a kernel file to the count (``install``), handed over once to the worker
_ADD_KERNEL_FILE: list = []


def kernel_file_adder() -> Any:
    """``add(filename)``, once (None after): the worker takes it before any kernel loads."""
    return _ADD_KERNEL_FILE.pop() if _ADD_KERNEL_FILE else None
