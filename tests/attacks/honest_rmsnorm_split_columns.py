"""Honest but unusual: RMSNorm with the columns split across programs (partial sums of squares
per column chunk, then each chunk normalised from the summed partials in a fixed order)."""
import torch
import triton
import triton.language as tl

SPLITS = 2


@triton.jit
def _partial_squares(x_ptr, part_ptr, N, stride, chunk, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    row, split = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(split * chunk, split * chunk + chunk, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = (cols < N) & (cols < split * chunk + chunk)
        x = tl.load(x_ptr + row * stride + cols, mask=ok, other=0.0).to(tl.float32)
        acc += x * x
    tl.store(part_ptr + row * SPLITS + split, tl.sum(acc, axis=0))


@triton.jit
def _normalise(x_ptr, w_ptr, part_ptr, out_ptr, N, stride, chunk, eps, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    row, split = tl.program_id(0), tl.program_id(1)
    total = 0.0
    for s in range(SPLITS):
        total += tl.load(part_ptr + row * SPLITS + s)
    rstd = 1.0 / tl.sqrt(total / N + eps)
    for start in range(split * chunk, split * chunk + chunk, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = (cols < N) & (cols < split * chunk + chunk)
        x = tl.load(x_ptr + row * stride + cols, mask=ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
        y = (x * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)
        tl.store(out_ptr + row * N + cols, (w * y).to(out_ptr.dtype.element_ty), mask=ok)


def kernel_fn(x, weight, eps=1e-6):
    x = x.contiguous()
    M, N = x.shape
    out = torch.empty_like(x)
    if M == 0 or N == 0:
        return out
    part = torch.empty((M, SPLITS), dtype=torch.float32, device=x.device)
    chunk = triton.cdiv(N, SPLITS)
    _partial_squares[(M, SPLITS)](x, part, N, x.stride(0), chunk, SPLITS=SPLITS, BLOCK=64)
    _normalise[(M, SPLITS)](x, weight, part, out, N, x.stride(0), chunk, eps, SPLITS=SPLITS, BLOCK=64)
    return out
