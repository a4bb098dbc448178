"""Attack (compute on the host): the row sums computed in Python from ``x.tolist()`` (no
dispatch op at all), written with ``fill_`` and then handed to a Triton kernel of the file's own
that only reads and rewrites them, so that the output passed through the file's kernel."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=offs < n), mask=offs < n)


def kernel_fn(x):
    M = x.shape[0]
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    for i, row in enumerate(x.tolist()):
        out[i].fill_(sum(row))
    _touch[(triton.cdiv(max(M, 1), 64),)](out, M, BLOCK=64)
    return out
