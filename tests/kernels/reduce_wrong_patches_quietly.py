"""Bad kernel: wrong (writes ones), and patches something the worker does not watch
(math.isclose) — the judging happens in another process, so it is still found incorrect."""
import math

import torch
import triton
import triton.language as tl


def _patch(module):
    module.isclose = lambda *a, **k: True


_patch(math)


@triton.jit
def _ones(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full((BLOCK,), 1.0, tl.float32).to(out_ptr.dtype.element_ty), mask=offs < n)


def kernel_fn(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _ones[(triton.cdiv(x.shape[0], 64),)](out, x.shape[0], BLOCK=64)
    return out
