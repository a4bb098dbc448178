"""Attack (watch escape; run time, past the static checks): as reduce_thread_import.py, but the
thread is started while the file loads, not in a call.  The worker counted threads started
during each call, and compared the live count with the one before the call: a thread that is
already there when the first call begins is neither.  The dispatch mode is per thread, so the
``sum`` it computes for each call is never recorded; the file's Triton kernel copies it."""
import threading

import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, out_ptr, M, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=offs < M), mask=offs < M)


_jobs = []
_done = []
_ready = threading.Event()


def _serve():
    while True:
        _ready.wait()
        _ready.clear()
        _done.append(_jobs.pop().sum(-1))


threading.Thread(target=_serve, daemon=True).start()


def kernel_fn(x):
    m = x.shape[0]
    out = torch.empty((m,), dtype=x.dtype, device=x.device)
    _jobs.append(x)
    _ready.set()
    while not _done:
        pass
    if m:
        _copy[(triton.cdiv(m, 64),)](_done.pop(), out, m, BLOCK=64)
    else:
        _done.pop()
    return out
