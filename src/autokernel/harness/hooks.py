"""What would run a kernel's code outside its own call, in the worker (``outside_hooks``):
dispatch and function modes left on torch's stacks, profile and trace functions, garbage
collector callbacks.  The worker takes them before and after every call; a call that leaves
one behind is tampering (``changed_hooks``): the judge's own work after the call (drawing the
next call's inputs, digests, copies into the parent's buffers) would run the kernel's code,
unwatched and untimed."""
from __future__ import annotations

import gc
import sys
import threading
from typing import Any


def outside_hooks() -> dict[str, Any]:
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return {"a dispatch mode": tuple(id(m) for m in _get_current_dispatch_mode_stack()),
            "a torch function mode": torch._C._len_torch_function_stack(),
            "a profile function": id(sys.getprofile()), "a trace function": id(sys.gettrace()),
            "a thread profile function": id(getattr(threading, "getprofile", lambda: None)()),
            "a thread trace function": id(getattr(threading, "gettrace", lambda: None)()),
            "a garbage collector callback": tuple(id(c) for c in gc.callbacks)}


def changed_hooks(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """The hooks that differ, named, or None."""
    changed = [name for name in before if before[name] != after.get(name)]
    return " and ".join(changed) if changed else None
