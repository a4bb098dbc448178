"""ModelNew for KernelBench level 1 39_L2Norm_: x / ||x||_2 over each row.

One program per row: a first pass sums x*x per lane, a second pass writes x / sqrt(sum).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 2048


@triton.jit
def _row_norm(x_ptr, y_ptr, n_cols, stride, L2: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        x = tl.load(x_ptr + row * stride + c, mask=c < n_cols, other=0.0).to(tl.float32)
        acc += x * x if L2 else tl.abs(x)
    total = tl.sum(acc, axis=0)
    scale = tl.sqrt(total) if L2 else total / n_cols
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        x = tl.load(x_ptr + row * stride + c, mask=c < n_cols, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride + c, (x / scale).to(y_ptr.dtype.element_ty), mask=c < n_cols)


def row_norm(x, l2):
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    _row_norm[(rows,)](x, y, cols, x.stride(0), L2=l2, BLOCK=BLOCK, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return row_norm(x, l2=True)
