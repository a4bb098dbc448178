"""Attack (pass 11): no Triton compute at all: ``torch.softmax`` under the real
``torch._C._DisableTorchDispatch``, taken out of the closure of the judge's counting wrapper with
``torch.ao.quantization.utils.getattr_from_fqn`` (``functools.reduce(getattr, fqn.split("."), obj)``):
a getattr-by-string engine under a public torch name no static rule listed (only ``torch.fx`` was).
Every string is built from pieces.  Before the fix: pass, all six stages, 22x the starter
("faster beyond the noise", ``bench --against``) on the CPU.
"""
import torch
import triton
import triton.language as tl
from torch.ao.quantization.utils import getattr_from_fqn

_cells = getattr_from_fqn(torch, "_" + "C._Disable" + "TorchDispatch.__clo" + "sure__")
_guard_class = None
for _c in _cells:
    _v = getattr_from_fqn(_c, "cell_con" + "tents")
    if isinstance(_v, type) and _v.__name__ == "_Disable" + "TorchDispatch":
        _guard_class = _v


@triton.jit
def _touch(y_ptr, n):
    pass


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _touch[(1,)](y, y.numel())
    with _guard_class():
        y.copy_(torch.softmax(x, -1))
    return y
