"""Code of the kernel's run when the judge lets go of an earlier call's output (static checks pass).

The worker keeps each call's output, then its last 16 in a history; at the start of a later
request it drops the oldest, and the inputs of the previous request, with nothing watching.
Attributes planted on an output are checked right after its own call only: this file keeps its
previous output, plants a suspended generator on it during the next call (``prev.later = g``)
and lets go of it, so the judge holds the last reference.  When the judge drops it, the
generator's ``finally`` runs in the judge's own work, before the request's first draw: here it
launches a kernel of the file's (which nobody records there); a file could as well rebind what
that draw calls and put it back during the call, before the judge compares names."""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


@triton.jit
def _touch(out_ptr, n):
    pass


def _later():  # holds nothing of the output's: no reference cycle, freed with it
    try:
        yield
    finally:
        scratch = torch.empty((1,))
        _touch[(1,)](scratch, 1)  # in the judge's work: unwatched, unrecorded


_previous = []


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=64)
    while _previous:
        prev = _previous.pop()
        later = _later()
        next(later)
        prev.later = later
        del prev, later
    _previous.append(out)
    return out
