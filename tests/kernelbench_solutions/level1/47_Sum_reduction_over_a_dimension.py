"""ModelNew for KernelBench level 1 47_Sum_reduction_over_a_dimension: sum over one dimension.

The input is seen as (outer, R, inner) around the reduced dimension; one program per outer
index and block of inner columns walks down R, so loads are coalesced along the inner axis and
the order of the additions is fixed (deterministic).
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_INNER = 256
BLOCK_R = 16


@triton.jit
def _sum_dim(x_ptr, y_ptr, R, inner, BLOCK_R: tl.constexpr, BLOCK_INNER: tl.constexpr):
    outer = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_INNER + tl.arange(0, BLOCK_INNER)
    rows = tl.arange(0, BLOCK_R)
    base = x_ptr + outer * R * inner
    acc = tl.zeros((BLOCK_R, BLOCK_INNER), tl.float32)
    for start in range(0, R, BLOCK_R):
        r = start + rows
        mask = (r[:, None] < R) & (cols[None, :] < inner)
        acc += tl.load(base + r[:, None].to(tl.int64) * inner + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.store(y_ptr + outer * inner + cols, total.to(y_ptr.dtype.element_ty), mask=cols < inner)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer = math.prod(x.shape[:dim])
        R = x.shape[dim]
        inner = math.prod(x.shape[dim + 1:])
        out_shape = x.shape[:dim] + (1,) + x.shape[dim + 1:]
        y = torch.empty(out_shape, device=x.device, dtype=x.dtype)
        grid = (outer, triton.cdiv(inner, BLOCK_INNER))
        _sum_dim[grid](x, y, R, inner, BLOCK_R=BLOCK_R, BLOCK_INNER=BLOCK_INNER, num_warps=4)
        return y
