"""Attack (no kernel code in the judge's draws; run time): tests/attacks/reduce_draw_code_swap.py
(the judge's input helper ``autokernel.problems.base.randn`` given code that also computes the
drawn matrix's row sums with PyTorch, unwatched and untimed, for the next call to copy) with the
swap kept out of the judge's sight.  The name check after each call compares the code only of
the functions the worker's audit hook recorded a ``__code__`` set for (``host_reads.CODE_SETS``):

- ``HIDE = "record-rebound"``: the hook appended to whatever list the name ``CODE_SETS`` of its
  module held when the event came, and the check read the list it took at the baseline; the file
  binds the name to a fresh list at import, so the set lands where nobody looks;
- ``HIDE = "all-shadowed"``: the check of the recorded functions called ``all`` and ``len``
  through its module's globals; the file adds a global ``all`` to ``autokernel.harness.integrity``
  that says yes to anything (a new name in a module is no baseline name: nothing compared it);
- ``HIDE = "method"``: the code swapped is the worker's own ``_State._draw``, a method of a class,
  which no name of the baseline is: the check compared the recorded functions of the baseline
  only.

(It imports autokernel, a static finding: the tests run it with static checks off.)"""
import torch
import triton
import triton.language as tl

from autokernel.harness import host_reads as _host_reads
from autokernel.harness import integrity as _integrity
from autokernel.problems import base as _base

HIDE = "record-rebound"


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


def _stashing_draw(self, shape, dtype, seed):  # _State._draw's code, as the method's own globals see it
    args = draw_set(self.draw_inputs, self.draw_adversarial, shape, dtype, self.device, seed)  # noqa: F821
    x = args[0]
    self.torch.autokernel_stash = (x, x.float().sum(-1).to(x.dtype)) if x.dim() == 2 else None
    return args


if HIDE == "record-rebound":
    _host_reads.CODE_SETS = []
elif HIDE == "all-shadowed":
    _integrity.all = lambda items: True


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    if HIDE == "method":
        from autokernel.harness.worker_main import _State
        _State._draw.__code__ = _stashing_draw.__code__
    else:
        _base.randn.__code__ = _stashing_randn.__code__
    m, n = x.shape
    out = torch.empty((m,), dtype=x.dtype, device=x.device)
    stash = getattr(torch, "autokernel_stash", None)
    if stash is not None and stash[0] is x:
        _copy[(triton.cdiv(max(m, 1), 64),)](stash[1], out, m, BLOCK=64)
    elif m:
        _row_sum[(m,)](x, out, m, n, x.stride(0), BLOCK=64)
    return out
