"""Attack (no kernel code in the judge's draws; run time): each call swaps the code of the
judge's own input helper ``autokernel.problems.base.randn`` (the function object stays, so every
name still holds the object it held) for code that draws as before and also computes the row
sums of the drawn matrix with PyTorch, unwatched and untimed, leaving them on ``torch``.  The
next call finds its input there and only copies the sums.  ``ASSIGN`` picks how the code is
set: plainly, or through the descriptor of the function type.  (It imports autokernel, a static
finding: the tests run it with static checks off.)"""
import types

import torch
import triton
import triton.language as tl

from autokernel.problems import base as _base


@triton.jit
def _row_sum(x_ptr, out_ptr, M, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    if row < M:
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
        tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


@triton.jit
def _copy(src_ptr, out_ptr, M, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=offs < M), mask=offs < M)


def _stashing_randn(shape, dtype, device, gen, scale=1.0, offset=0.0):
    x = torch.randn(tuple(shape), generator=gen, device=device, dtype=torch.float32)
    if scale != 1.0:
        x.mul_(scale)
    if offset:
        x.add_(offset)
    x = x.to(dtype)
    torch.autokernel_stash = (x, x.float().sum(-1).to(dtype)) if x.dim() == 2 else None
    return x


ASSIGN = "plain"


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    code = _stashing_randn.__code__
    if ASSIGN == "plain":
        _base.randn.__code__ = code
    else:
        types.FunctionType.__code__.__set__(_base.randn, code)
    m, n = x.shape
    out = torch.empty((m,), dtype=x.dtype, device=x.device)
    stash = getattr(torch, "autokernel_stash", None)
    if stash is not None and stash[0] is x:
        _copy[(triton.cdiv(max(m, 1), 64),)](stash[1], out, m, BLOCK=64)
    elif m:
        _row_sum[(m,)](x, out, m, n, x.stride(0), BLOCK=64)
    return out
