"""ModelNew for KernelBench level 1 40_LayerNorm: LayerNorm over the last three dimensions.

Rows are long (features x dim1 x dim2) and few, so each row is split into chunks:
1. one program per (row, chunk) writes the chunk's sum and sum of squares (shifted by the
   row's first element, so the variance does not cancel);
2. one program per row adds its chunks in a fixed order (deterministic) into mean and rstd;
3. one program per (row, chunk) writes (x - mean) * rstd * weight + bias.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK = 4096


@triton.jit
def _partials(x_ptr, part_ptr, n, n_chunks, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offs < n
    shift = tl.load(x_ptr + row * n).to(tl.float32)
    x = tl.load(x_ptr + row * n + offs, mask=mask, other=0.0).to(tl.float32)
    d = tl.where(mask, x - shift, 0.0)
    out = part_ptr + (row * n_chunks + chunk) * 2
    tl.store(out, tl.sum(d, axis=0))
    tl.store(out + 1, tl.sum(d * d, axis=0))


@triton.jit
def _stats(x_ptr, part_ptr, stats_ptr, n, n_chunks, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    idx = tl.arange(0, BLOCK)
    s = tl.zeros((BLOCK,), tl.float32)
    q = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_chunks, BLOCK):
        c = start + idx
        s += tl.load(part_ptr + (row * n_chunks + c) * 2, mask=c < n_chunks, other=0.0)
        q += tl.load(part_ptr + (row * n_chunks + c) * 2 + 1, mask=c < n_chunks, other=0.0)
    mean_d = tl.sum(s, axis=0) / n
    var = tl.maximum(tl.sum(q, axis=0) / n - mean_d * mean_d, 0.0)
    shift = tl.load(x_ptr + row * n).to(tl.float32)
    tl.store(stats_ptr + row * 2, shift + mean_d)
    tl.store(stats_ptr + row * 2 + 1, 1.0 / tl.sqrt(var + eps))


@triton.jit
def _normalize(x_ptr, w_ptr, b_ptr, stats_ptr, y_ptr, n, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < n
    mean = tl.load(stats_ptr + row * 2)
    rstd = tl.load(stats_ptr + row * 2 + 1)
    x = tl.load(x_ptr + row * n + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n + offs, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x):
        x = x.contiguous()
        n = math.prod(self.ln.normalized_shape)
        rows = x.numel() // n
        n_chunks = triton.cdiv(n, CHUNK)
        parts = torch.empty((rows, n_chunks, 2), device=x.device, dtype=torch.float32)
        stats = torch.empty((rows, 2), device=x.device, dtype=torch.float32)
        y = torch.empty_like(x)
        _partials[(rows, n_chunks)](x, parts, n, n_chunks, CHUNK=CHUNK, num_warps=8)
        _stats[(rows,)](x, parts, stats, n, n_chunks, self.ln.eps, BLOCK=1024, num_warps=4)
        _normalize[(rows, n_chunks)](x, self.ln.weight.contiguous(), self.ln.bias.contiguous(), stats, y, n,
                                     CHUNK=CHUNK, num_warps=8)
        return y
