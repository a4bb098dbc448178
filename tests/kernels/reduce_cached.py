"""Bad kernel: remembers its result per input tensor and returns a copy of the old result
when called again on the same tensor (even after the values changed in place)."""
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
    key = (x.data_ptr(), tuple(x.shape), x.dtype)
    if key in _seen:
        return _seen[key].clone()
    x = x.contiguous()
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _sum_rows[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=128)
    _seen[key] = out
    return out
