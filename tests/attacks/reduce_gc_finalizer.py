"""Row sums computed by a finalizer the garbage collector runs in the judge's own work.

Each call hands its output to the file's own kernel, which writes nothing, and leaves behind a
reference cycle holding a suspended generator whose ``finally`` launches the real row-sum kernel
on that output.  It then fills the collector's youngest generation to its threshold, so the
first container the judge allocates after the call returns (in its checks right after the call)
starts a collection, which frees the cycle and runs the ``finally``: the work runs after the
timer stopped.  (``gc`` is a static finding; the tests run this with static checks off, as a
file that found another way to the collector's counts would meet the judge.  Without the counts
a file can still learn where the collection lands over calls: a flag set in its calls tells the
finalizer whether it ran inside one.)"""
import gc

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


_padding = []


_real_ones_like = torch.ones_like


def _ones_like(*args, **kwargs):  # what a finalizer could leave for the judge's own work to run
    return _real_ones_like(*args, **kwargs)


def _later(x, out):
    try:
        yield
    finally:
        if x.shape[0]:
            _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=64)
        if REBIND:
            torch.ones_like = _ones_like


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _touch[(1,)](out, out.numel())
    if ENABLE_COLLECTOR:
        gc.enable()
    cycle = [_later(x, out)]
    cycle.append(cycle)
    next(cycle[0])
    del cycle
    _padding.clear()
    threshold = gc.get_threshold()[0]
    while gc.get_count()[0] < threshold:
        _padding.append([])
    return out


ENABLE_COLLECTOR = False  # the tests switch these on: the collector re-enabled in each call
REBIND = False  # the finalizer also rebinds a name of torch's (seen only through the fingerprint)
