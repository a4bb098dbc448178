"""Attack (compute outside Triton): torch.sum reached through a name built at run time."""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def row_sum(x, out=None):
    x = x.contiguous()
    if out is None:
        out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=64)
    return out


def kernel_fn(x):
    row_sum(x)
    return getattr(torch, "su" + "m")(x, 1)
