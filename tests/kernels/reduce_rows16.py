"""Bad kernel: assumes the number of rows is a multiple of 16 (no row mask, 16 rows per
program): right on the usual target shapes, wrong on odd row counts."""
import torch
import triton
import triton.language as tl


@triton.jit
def _sum_rows16(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    acc = tl.zeros((16, BLOCK), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=(cols < N)[None, :], other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    x = x.contiguous()
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _sum_rows16[(x.shape[0] // 16,)](x, out, x.shape[1], x.stride(0), BLOCK=64)
    return out
