"""Bad kernel: keeps its running sums in the input's dtype (fp16) instead of fp32.  Close
enough on ordinary values, but rows of large values that cancel overflow to inf."""
import torch
import triton
import triton.language as tl


@triton.jit
def _sum_rows(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=x_ptr.dtype.element_ty)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc.to(tl.float32), axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _sum_rows[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=16)
    return out
