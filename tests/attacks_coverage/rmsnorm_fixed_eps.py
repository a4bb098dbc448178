"""Attack (non-tensor argument fixed): an RMSNorm that ignores its eps argument and uses 1e-6,
the only value the inputs used to pass; a model whose eps is 1e-5 then gets wrong results."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_rows(x_ptr, w_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + 1e-6)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    h = (x * r).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride + cols, (w * h).to(out_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x, weight, eps=1e-6):
    x = x.contiguous()
    m, n = x.shape
    out = torch.empty_like(x)
    if m and n:
        _rmsnorm_rows[(m,)](x, weight.contiguous(), out, n, x.stride(0), BLOCK=triton.next_power_of_2(n))
    return out
