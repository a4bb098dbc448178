"""Attack (no kernel code in the judge's draws; run time): the code swap of
tests/attacks/reduce_draw_code_swap.py (the judge's input helper ``autokernel.problems.base.randn``
given code that also computes the drawn matrix's row sums with PyTorch, unwatched and untimed,
for the next call to copy), hidden by forging the audit hook's record in place.

The name check after each call compares the code only of the functions the worker's audit hook
recorded a ``__code__`` set for.  The record was a module-level list, ``host_reads.CODE_SETS``:
the file lets the set be recorded, then replaces the new entry with one for a function of its
own (holding the code it has), so the record keeps the length the check expects and names no
function of the judge's.  (Where no such list is left, it edits whatever it finds under that
name: nothing.)

(It imports autokernel, a static finding: the tests run it with static checks off.)"""
import torch
import triton
import triton.language as tl

from autokernel.harness import host_reads as _host_reads
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


def _decoy():
    return None


def _forge_record() -> None:
    record = getattr(_host_reads, "CODE_SETS", None)
    if type(record) is not list:
        return
    for i, entry in enumerate(record):
        if entry[0] is _base.randn:
            record[i] = (_decoy, _decoy.__code__)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    _base.randn.__code__ = _stashing_randn.__code__
    _forge_record()
    m, n = x.shape
    out = torch.empty((m,), dtype=x.dtype, device=x.device)
    stash = getattr(torch, "autokernel_stash", None)
    if stash is not None and stash[0] is x:
        _copy[(triton.cdiv(max(m, 1), 64),)](stash[1], out, m, BLOCK=64)
    elif m:
        _row_sum[(m,)](x, out, m, n, x.stride(0), BLOCK=64)
    return out
