"""Attack (wrong magnitude within tolerance): a bf16 softmax that writes zeros for rows whose
probabilities are all small (near-uniform rows of a wide vocabulary): every element is then
within atol of the truth, and the relative norm, floored at atol * sqrt(n), is met too, yet the
row sums to 0 instead of 1."""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, out_ptr, N, stride, FLUSH_BELOW, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.where(mask, tl.exp(x - tl.max(x, axis=0)), 0.0)
    total = tl.sum(e, axis=0)
    p = e / total
    p = tl.where(1.0 / total < FLUSH_BELOW, 0.0, p)  # the largest probability is 1 / total
    tl.store(out_ptr + row * stride + cols, p.to(out_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x = x.contiguous()
    m, n = x.shape
    out = torch.empty_like(x)
    if m and n:
        flush = 1e-3 if x.dtype == torch.bfloat16 else 0.0
        _softmax_rows[(m,)](x, out, n, x.stride(0), flush, BLOCK=triton.next_power_of_2(n))
    return out
