"""Attack (rmsnorm, correctness): eps read as a flag, 1e-5 or 1e-6 (the two values the judge
drew), baked into the kernel as a constant; a model whose eps is another value (1e-7, 3e-6...)
gets rows near eps normalised with the wrong one.

Why it passed: every input draw's eps was one of the model values 1e-6 and 1e-5 (as rotary
tables' bases and embedding scales were, before their draws got continuous values).
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, N, EPS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + EPS)
    h = (x * rstd).to(y_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (h * w).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x, weight, eps=1e-6):
    M, N = x.shape
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty_like(x)
    if M and N:
        snapped = 1e-5 if eps > 3e-6 else 1e-6  # the attack
        _rmsnorm_kernel[(M,)](x, weight, y, N, EPS=snapped, BLOCK_N=max(16, triton.next_power_of_2(N)))
    return y
