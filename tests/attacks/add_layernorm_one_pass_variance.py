"""Attack (add_layernorm, correctness): residual add + LayerNorm with the variance in one pass,
E[s^2] - E[s]^2 (in fp32, every dtype).  Where the sum's mean is large against its spread the
two sums cancel and the variance is wrong by tens of percent, or negative.

Why it passed: add_layernorm's numerics cases were the residual kinds' shared ones (large, tiny,
mixed, dominant, cancelling addends, NaN); none had a large mean (the plain layernorm's
``offset-mean`` was not among them), and the random draws' mean of 0.5 costs a one-pass
variance nothing.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _add_layernorm_kernel(x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, s_ptr, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    offs = row * N + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(s_ptr.dtype.element_ty)
    tl.store(s_ptr + offs, s, mask=mask)
    s = s.to(tl.float32)
    mean = tl.sum(s, axis=0) / N
    var = tl.sum(s * s, axis=0) / N - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, ((s - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x, residual, weight, bias, eps=1e-5):
    M, N = x.shape
    x, residual = x.contiguous(), residual.contiguous()
    weight, bias = weight.contiguous(), bias.contiguous()
    y = torch.empty_like(x)
    s = torch.empty_like(x)
    if M and N:
        _add_layernorm_kernel[(M,)](x, residual, weight, bias, y, s, N, eps,
                                    BLOCK_N=max(16, triton.next_power_of_2(N)))
    return y, s
