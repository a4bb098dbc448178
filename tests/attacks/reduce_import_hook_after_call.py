"""Attack (the watch cannot be escaped; run time, past the static checks): the row sums by
PyTorch, run by the judge's own checks right after the call.  Each call hands its output to a
Triton kernel of the file's own that writes nothing, then rebinds ``builtins.__import__``; the
worker's first look at the hooks after the call (``outside_hooks``: ``import torch`` inside a
function) runs it, outside the watch and with the launch record closed: it puts the original
back, computes ``x.sum(-1)`` into the output and returns the module asked for."""
import builtins

import torch
import triton
import triton.language as tl

_bt = builtins
_real_import = builtins.__import__


@triton.jit
def _touch(x_ptr, out_ptr, M):
    pass


def kernel_fn(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _touch[(1,)](x, out, x.shape[0])

    def finishing_import(*args, **kwargs):
        _bt.__import__ = _real_import
        out.copy_(x.sum(-1))
        return _real_import(*args, **kwargs)

    _bt.__import__ = finishing_import
    return out
