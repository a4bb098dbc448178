"""Bad kernel: returns the very same output tensor for the same input tensor."""
import torch
import triton
import triton.language as tl

_seen = {}


@triton.jit
def _sum_rows(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype)
    out = _seen.get(key)
    if out is None:
        out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
        _seen[key] = out
    _sum_rows[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=128)
    return out
