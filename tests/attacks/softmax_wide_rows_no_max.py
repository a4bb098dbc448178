"""Attack (softmax, correctness): rows that fit one block take the textbook path (max, exp,
sum); rows wider than 512 take a streaming two-pass path that skips the max: sum exp(x) in
one pass, write exp(x) / sum in the next.  Logits past ~88 overflow exp in fp32 there (inf / inf
= NaN), which any row of large logits reaches.

Why it passed: the numerics stage draws its large values at the target shapes only (N = 256,
300 on the CPU); the only wider row, the 1x1100 edge shape, got regular draws (|x| < ~10).
"""
import torch
import triton
import triton.language as tl

WIDE = 512
CHUNK = 256


@triton.jit
def _one_block(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _streaming(x_ptr, y_ptr, N, stride, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, CHUNK)
    total = 0.0
    for start in range(0, N, CHUNK):
        x = tl.load(x_ptr + row * stride + start + cols, mask=start + cols < N, other=-float("inf")).to(tl.float32)
        total += tl.sum(tl.exp(x), axis=0)
    for start in range(0, N, CHUNK):
        x = tl.load(x_ptr + row * stride + start + cols, mask=start + cols < N, other=-float("inf")).to(tl.float32)
        tl.store(y_ptr + row * stride + start + cols, (tl.exp(x) / total).to(y_ptr.dtype.element_ty),
                 mask=start + cols < N)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    y = torch.empty_like(x)
    if M == 0 or N == 0:
        return y
    if N <= WIDE:
        _one_block[(M,)](x, y, N, x.stride(0), BLOCK=triton.next_power_of_2(N))
    else:
        _streaming[(M,)](x, y, N, x.stride(0), CHUNK=CHUNK)
    return y
