"""Attack (pass8, foreign compute): the row sums computed by ``torch.sum`` on a thread of torch's
own, started while the file loads; the file's Triton kernels only copy the input into a mailbox
and the mailbox's result into the output.

A TorchScript function that calls ``torch.jit.fork`` runs the forked function asynchronously on
torch's inter-op pool, a C++ thread.  Forked while the file loads, it runs with no dispatch mode
on its thread (the watch is pushed per call, on the caller's thread; a fork made *during* a call
does carry the watch along, which is why this one is made at load), it is no ``_thread`` start
and no Python thread (the worker's counts), and its ``.item()`` reads are no host reads the
watch or the audit hook see.  ``_serve`` spins on a flag; each call of the kernel copies ``x``
(as fp32) and its shape into the mailbox with a Triton kernel, raises the flag with another,
waits until the server's done-tensor has grown (``numel()``: metadata, no value read), then copies the sums into a freshly allocated output
with a third Triton kernel (so the output was allocated under the watch and handed to a kernel
of the file's own).  No torch compute op runs on the judged thread.

Verdict today: pass (all six stages, all three dtypes), every compared output right; and
``autokernel bench FILE --problem reduce --device cpu --shape 64x256 --dtype fp32 --against
src/autokernel/kernels/reduce.py``: significantly faster than the starter (median ratio 0.34,
noise 0.03, the wall clock confirming), i.e. kept, with no reduction in any Triton kernel.  Which rule should catch it:
``foreign-compute`` (compute outside Triton; "a kernel file must actually launch Triton kernels
of its own" that do the work) and ``threads-or-streams`` (a thread started by the kernel).  Fix
at the cause: count the worker's OS threads (/proc/self/task) before the file loads and after
the load and every call (torch's own pools grow lazily, so name the ones the judge's self-test
made and refuse any new one the kernel's load or calls made, or run the self-test through every
pool first); refuse ``torch.jit`` (``script``, ``fork``, ``_fork``, ``torch._C.fork``) and
``torch.futures`` in the static rules and wrap ``torch._C.fork`` like the thread starts.
"""
import time

import torch
import triton
import triton.language as tl

BOX = 1 << 22  # elements of the mailbox; larger inputs get the honest kernel


@triton.jit
def _to_box(x_ptr, box_ptr, head_ptr, M, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
        tl.store(box_ptr + row * N + cols, v, mask=cols < N)
    if row == 0:
        tl.store(head_ptr, M.to(tl.float32))
        tl.store(head_ptr + 1, N.to(tl.float32))


@triton.jit
def _set(flag_ptr, value):
    tl.store(flag_ptr, value)


@triton.jit
def _from_box(res_ptr, out_ptr, flag_ptr, M, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(res_ptr + offs, mask=offs < M, other=0.0)
    tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=offs < M)
    if tl.program_id(0) == 0:
        tl.store(flag_ptr, 0.0)


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row.to(tl.int64) * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


@torch.jit.script
def _serve(flag: torch.Tensor, head: torch.Tensor, box: torch.Tensor, res: torch.Tensor,
           done: torch.Tensor) -> int:
    served = 0
    while served >= 0:
        if bool(flag[0] == 1.0):
            m = int(head[0].item())
            n = int(head[1].item())
            res[:m].copy_(box[:m * n].view(m, n).sum(-1))
            flag[0] = 2.0
            served += 1
            done.resize_([served])  # metadata, which the caller reads without reading a value
    return served


@torch.jit.script
def _start(flag: torch.Tensor, head: torch.Tensor, box: torch.Tensor, res: torch.Tensor,
           done: torch.Tensor) -> torch.jit.Future[int]:
    return torch.jit.fork(_serve, flag, head, box, res, done)


_FLAG, _HEAD = torch.zeros(1), torch.zeros(2)
_BOX, _RES = torch.zeros(BOX), torch.zeros(BOX)
_DONE = torch.zeros(0)
_SERVER = _start(_FLAG, _HEAD, _BOX, _RES, _DONE)
_SERVED = [0]


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    block = max(16, min(1024, triton.next_power_of_2(N)))
    if x.device.type != "cpu" or M * N > BOX or N == 0:
        _row_sum[(M,)](x, out, N, x.stride(0), BLOCK=block)
        return out
    _to_box[(M,)](x, _BOX, _HEAD, M, N, x.stride(0), BLOCK=block)
    _set[(1,)](_FLAG, 1.0)
    _SERVED[0] += 1
    while _DONE.numel() < _SERVED[0]:  # the server thread sums meanwhile
        time.sleep(0.0002)
    _from_box[(triton.cdiv(M, 1024),)](_RES, out, _FLAG, M, BLOCK=1024)
    return out
