"""Bad kernel: right sums, but it uses its input as scratch space (zeroes what it read)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _sum_rows_and_clear(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        acc += tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(x_ptr + row * stride + cols, tl.zeros((BLOCK,), dtype=tl.float32).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _sum_rows_and_clear[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=128)
    return out
