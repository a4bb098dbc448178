"""Attack (pass 9): the row sums computed by ``torch.sum`` on a thread of torch's inter-op pool,
the TorchScript that forks it compiled by ``torch.CompilationUnit``: no Triton compute, passes.

The eighth pass's ``reduce_pass8_interop_thread_compute.py`` compiled its server with
``@torch.jit.script`` and forked it with ``torch.jit.fork``; its fix refused ``torch.jit`` and
``torch.futures`` statically and counted the ``torch._C`` entry points that compile, trace or load
TorchScript (``launches.TORCH_THREAD_ENTRIES``).  ``torch.CompilationUnit`` is the same class as
``torch._C.CompilationUnit``, a public name at torch's top level (no ``jit`` in the expression),
and it compiles TorchScript source text given to its constructor (or ``define``) without any of
the counted functions; the text is a string, where ``torch.jit.fork`` is no static finding.  The
server is pass 8's: it sums the rows the file's Triton kernel copied into a mailbox and resizes
a tensor to say it is done (metadata: no value read on the caller's side).  The file's Triton
kernels only copy.

Which rule should catch it: ``threads-or-streams`` (and ``torch-op``: the sums are torch's).
Fix at the cause: count compiling TorchScript from source (``CompilationUnit.__init__`` and
``define``) like the other entry points, and make ``CompilationUnit`` a static finding.
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


_SOURCE = """
def serve(flag: Tensor, head: Tensor, box: Tensor, res: Tensor, done: Tensor) -> int:
    served = 0
    while served >= 0:
        if bool(flag[0] == 1.0):
            m = int(head[0].item())
            n = int(head[1].item())
            res[:m].copy_(box[:m * n].view(m, n).sum(-1))
            flag[0] = 2.0
            served += 1
            done.resize_([served])
    return served


def start(flag: Tensor, head: Tensor, box: Tensor, res: Tensor, done: Tensor) -> Future[int]:
    return torch.jit.fork(serve, flag, head, box, res, done)
"""
_UNIT = torch.CompilationUnit(_SOURCE)  # TorchScript compiled from source text, by torch's top-level name


_FLAG, _HEAD = torch.zeros(1), torch.zeros(2)
_BOX, _RES = torch.zeros(BOX), torch.zeros(BOX)
_DONE = torch.zeros(0)
_SERVER = _UNIT.start(_FLAG, _HEAD, _BOX, _RES, _DONE)
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
