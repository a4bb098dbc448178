"""Attack (layernorm, correctness): the variance in one pass, E[x^2] - E[x]^2, for bf16 and fp16
inputs (one read of the row for both sums); the variance around the mean for fp32 only.  Where
the mean is large against the spread the two fp32 sums cancel and the variance is wrong by tens
of percent, or negative.

Why it passed: the one case with a large mean (an offset 100x the spread) costs a one-pass
variance ~1e-3 of its value, which only fp32's tolerance shows; bf16 and fp16 were never given
rows whose spread is below fp32's rounding of E[x^2].
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    if ONE_PASS:
        var = tl.sum(x * x, axis=0) / N - mean * mean
    else:
        var = tl.sum(d * d, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (d * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x, weight, bias, eps=1e-5):
    M, N = x.shape
    x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
    y = torch.empty_like(x)
    if M and N:
        _layernorm_kernel[(M,)](x, weight, bias, y, N, eps, BLOCK_N=max(16, triton.next_power_of_2(N)),
                                ONE_PASS=x.dtype != torch.float32)
    return y
