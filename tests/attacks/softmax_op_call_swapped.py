"""Softmax by torch.softmax, run inside the watch's own ``__torch_dispatch__``: the class of the
op objects the watch calls (``func(*args)``) is found at import through the flop counter's registry
(keyed by op packets, whose ``.default`` is an OpOverload); during the call its ``__call__`` is swapped (a local
alias), so the watch's call of ``aten.view`` for ``y.view(...)`` runs the file's function with
the watch off torch's stack: it puts ``__call__`` back and writes the softmax into ``y``.  A
Triton kernel of the file's is handed ``y`` and writes nothing (sixth red-team pass: passed all
six stages and timing)."""
import torch
import triton
import triton.language as tl
from torch.utils.flop_counter import flop_registry

_op_class = type(next(iter(flop_registry)).default)
_original_call = _op_class.__call__


@triton.jit
def _touch(y_ptr, n):
    pass


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)

    def call_in_the_watch(op, *args, **kwargs):
        _op_class.__call__ = _original_call
        out = _original_call(op, *args, **kwargs)
        y.copy_(torch.softmax(x, -1))
        return out

    _op_class.__call__ = call_in_the_watch
    y.view(y.shape)
    _op_class.__call__ = _original_call
    _touch[(1,)](y, y.numel())
    return y
