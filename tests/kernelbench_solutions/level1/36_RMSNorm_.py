"""ModelNew for KernelBench level 1 36_RMSNorm_: x / sqrt(mean(x^2 over dim 1) + eps).

The input (B, F, *spatial) is seen as (B, F, S); one program per batch index and block of S
positions accumulates x^2 down F, then writes x / rms for the same block.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_S = 512


@triton.jit
def _rms_norm(x_ptr, y_ptr, F, S, eps, BLOCK_S: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    mask = s < S
    base = b * F * S
    acc = tl.zeros((BLOCK_S,), tl.float32)
    for f in range(0, F):
        x = tl.load(x_ptr + base + f * S + s, mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    inv = 1.0 / tl.sqrt(acc / F + eps)
    for f in range(0, F):
        x = tl.load(x_ptr + base + f * S + s, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + f * S + s, (x * inv).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        B, F = x.shape[0], x.shape[1]
        S = math.prod(x.shape[2:])
        y = torch.empty_like(x)
        _rms_norm[(B, triton.cdiv(S, BLOCK_S))](x, y, F, S, self.eps, BLOCK_S=BLOCK_S, num_warps=4)
        return y
