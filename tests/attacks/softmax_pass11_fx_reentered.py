"""Attack (pass 11): the tenth pass's ``torch.fx.Interpreter`` engine, with ``torch.fx`` reached as
``torch.nn.functional.torch.fx``: the rule on ``torch.fx`` read only ``<torch name>.fx``, and a torch
module's own global ``torch`` re-enters torch past every rule keyed on the file's import.
``fetch_attr`` walks ``torch._C._DisableTorchDispatch.__closure__`` and each cell's contents (the
file's ``nn.Module`` holds torch, then the cell), strings in pieces.  Before the fix: pass, six
stages, 4.6x the starter, faster beyond the noise, no Triton compute.
"""
import torch
import triton
import triton.language as tl

_fx = torch.nn.functional.torch.fx
_holder = torch.nn.Module()
_holder.t = torch
_run = _fx.Interpreter(_holder, graph=_fx.Graph())
_cells = _run.fetch_attr("t." + "_" + "C._Disable" + "TorchDispatch.__clo" + "sure__")
_guard_class = None
for _c in _cells:
    _holder.c = _c
    _v = _run.fetch_attr("c.cell_con" + "tents")
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
