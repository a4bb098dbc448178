"""Attack (watch escape): the sums computed by torch in a short-lived thread (the dispatch mode
is per thread), copied into an output that a Triton kernel of the file's own was handed; the
thread has ended by the time the call returns, so counting threads afterwards sees nothing."""
import threading

import torch
import triton
import triton.language as tl


@triton.jit
def _touch(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=offs < n), mask=offs < n)


def kernel_fn(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    worker = threading.Thread(target=lambda: out.copy_(x.sum(1)))
    worker.start()
    worker.join()
    _touch[(1,)](out, out.numel(), BLOCK=triton.next_power_of_2(max(out.numel(), 1)))
    return out
