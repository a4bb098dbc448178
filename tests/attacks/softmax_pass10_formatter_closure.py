"""Attack (pass 10): no Triton compute at all: ``torch.softmax`` under the real
``torch._C._DisableTorchDispatch``, taken out of the closure of the judge's own wrapper of it.

``string.Formatter`` resolves a replacement field's dotted name with ``getattr`` and indexing
(``get_field``) and hands the object it found to ``format_field``, which a subclass overrides to
keep it: a getattr with a computed name, under no name the static rules knew (only
``get_field`` was).  The field walks ``torch._C._DisableTorchDispatch`` (since this pass the
judge's counting wrapper, ``escapes.py``), its ``__closure__`` and the cell holding the original
class (the strings in pieces).  Entered in the call, the original hides ``torch.softmax`` from
the watch, and the wrapper never counts it.
Against this branch's run-time layer: pass, all six stages, 8.7x the starter ("faster beyond the
noise", ``bench --against``) on the CPU.  Caught by the static rules (``Formatter``); with them
off it still passes: what a kernel reaches by a getattr with a string includes every closure of
the judge's (tests/attacks_open/README.md, tenth pass, open).
"""
import string

import torch
import triton
import triton.language as tl


class _Grab(string.Formatter):
    def format_field(self, value, format_spec):
        _found.append(value)
        return ""


_found = []
_grab = _Grab()
_field = "{0._" + "C._Disable" + "TorchDispatch.__clo" + "sure__[4].cell_con" + "tents}"
_grab.format(_field, torch)
_guard_class = _found[-1]


@triton.jit
def _touch(y_ptr, n):
    pass


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _touch[(1,)](y, y.numel())
    with _guard_class():
        y.copy_(torch.softmax(x, -1))
    return y
