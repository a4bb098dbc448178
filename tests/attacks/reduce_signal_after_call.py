"""Attack (fourth red-team pass; the gain is on a GPU): ``_signal`` (the C side of ``signal``,
which the static rules did not name) sets a SIGALRM handler at import.  Each call hands its
output to a do-nothing Triton kernel and arms a one-shot 50 us timer; on a GPU the alarm comes
while the worker waits in ``torch.cuda.synchronize()`` after recording the call's end event, so
the handler runs right after it, before the output's digest: it computes the row sums with
PyTorch into the output, after the timed window and before the digest.  (On the CPU the alarm
would land inside the call, under the watch: it is not armed there, and the zeros it returns
are wrong; what the CPU shows is that the handler is caught.)"""
import _signal

import torch
import triton
import triton.language as tl

_pending = []


def _finish(signum, frame):
    while _pending:
        x, out = _pending.pop()
        out.copy_(x.sum(-1))


_signal.signal(_signal.SIGALRM, _finish)


@triton.jit
def _touch(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32).to(out_ptr.dtype.element_ty), mask=offs < n)


def kernel_fn(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _touch[(triton.cdiv(x.shape[0], 64),)](out, x.shape[0], BLOCK=64)
        if x.is_cuda:  # on the CPU the alarm would land inside the call, under the watch
            _pending.append((x, out))
            _signal.setitimer(_signal.ITIMER_REAL, 5e-5)
    return out
