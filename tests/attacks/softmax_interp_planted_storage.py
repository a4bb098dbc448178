"""Attack (the watch cannot be escaped): softmax_interp_duck_argument.py again, past the rule
that launch arguments be plain tensors: the argument is a plain ``torch.Tensor`` (a scratch
allocation), with ``untyped_storage`` planted on it.  The interpreter asks the argument for its
storage (the planted function hands it an object whose ``.cpu`` is
``functools.partial(torch.softmax, x, -1)``) and calls ``.cpu()`` from its own frame, which the
watch exempts; the kernel copies the result.  The attribute is removed before the call returns."""
import functools

import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


class _Storage:
    pass


def kernel_fn(x):
    m, n = x.shape
    x = x.contiguous()
    out = torch.empty_like(x)
    src = torch.empty_like(x)
    fake = _Storage()
    fake.data_ptr = int  # one key for the interpreter's lookups
    fake.cpu = functools.partial(torch.softmax, x, -1)  # called from the interpreter's own frame
    fake.copy_ = id  # its copy back is a no-op
    src.untyped_storage = lambda: fake
    if m * n:
        _copy[(triton.cdiv(m * n, 256),)](src, out, m * n, BLOCK=256)
    del src.untyped_storage
    return out
