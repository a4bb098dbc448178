"""Attack (numerics at one shape only): a row softmax that skips the max-subtraction on its
fast path, taken when the row width is a multiple of 256.  exp() of large logits overflows
there (inf / inf = NaN), but random logits of scale 2 never overflow, and the adversarial
values used to reach only the smallest target shape, whose width is not a multiple of 256."""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, out_ptr, N, stride, SUBTRACT_MAX: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    if SUBTRACT_MAX:
        x = x - tl.max(x, axis=0)
    e = tl.where(mask, tl.exp(x), 0.0)
    tl.store(out_ptr + row * stride + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x = x.contiguous()
    m, n = x.shape
    out = torch.empty_like(x)
    if m and n:
        _softmax_rows[(m,)](x, out, n, x.stride(0), SUBTRACT_MAX=n % 256 != 0, BLOCK=triton.next_power_of_2(n))
    return out
