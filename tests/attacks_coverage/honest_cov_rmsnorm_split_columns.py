"""Honest (unusual): RMSNorm with each row split over column blocks.  The first kernel writes a
partial sum of squares per (row, block); the second adds a row's partials in a fixed order
(deterministic, no atomics) and normalises its own block.  eps comes from the caller."""
import torch
import triton
import triton.language as tl

BLOCK = 64


@triton.jit
def _partial_squares(x_ptr, part_ptr, N, stride, n_blocks, BLOCK: tl.constexpr):
    row, blk = tl.program_id(0), tl.program_id(1)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(part_ptr + row * n_blocks + blk, tl.sum(x * x, axis=0))


@triton.jit
def _normalise(x_ptr, w_ptr, part_ptr, out_ptr, N, stride, n_blocks, eps, BLOCK: tl.constexpr, PARTS: tl.constexpr):
    row, blk = tl.program_id(0), tl.program_id(1)
    idx = tl.arange(0, PARTS)
    squares = tl.sum(tl.load(part_ptr + row * n_blocks + idx, mask=idx < n_blocks, other=0.0), axis=0)
    r = 1.0 / tl.sqrt(squares / N + eps)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    h = (x * r).to(out_ptr.dtype.element_ty).to(tl.float32)  # rounded to the dtype, as the model does
    tl.store(out_ptr + row * stride + cols, (w * h).to(out_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x, weight, eps=1e-6):
    x = x.contiguous()
    m, n = x.shape
    out = torch.empty_like(x)
    if m == 0 or n == 0:
        return out
    n_blocks = triton.cdiv(n, BLOCK)
    parts = torch.empty((m, n_blocks), dtype=torch.float32, device=x.device)
    grid = (m, n_blocks)
    _partial_squares[grid](x, parts, n, x.stride(0), n_blocks, BLOCK=BLOCK)
    _normalise[grid](x, weight.contiguous(), parts, out, n, x.stride(0), n_blocks, float(eps), BLOCK=BLOCK,
                     PARTS=max(2, triton.next_power_of_2(n_blocks)))
    return out
