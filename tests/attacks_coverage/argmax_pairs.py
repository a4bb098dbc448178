"""Attack (integer output judged with a float tolerance): an argmax that looks at pairs of
neighbours and returns the even index of the winning pair, half the comparisons.  It is off
by one whenever the maximum sits at an odd index; at an index above ~50 that is within
rtol * |ref| of bf16, so it used to pass.  Below 64 it finds the exact index."""
import torch
import triton
import triton.language as tl


@triton.jit
def _argmax_pairs(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    best = tl.max(x, axis=0)
    exact = tl.min(tl.where(x == best, cols, BLOCK), axis=0)
    coarse = exact - exact % 2
    tl.store(out_ptr + row, tl.where(exact < 64, exact, coarse).to(tl.int64))


def kernel_fn(x):
    x = x.contiguous()
    m, n = x.shape
    out = torch.empty((m,), dtype=torch.int64, device=x.device)
    if m and n:
        _argmax_pairs[(m,)](x, out, n, x.stride(0), BLOCK=triton.next_power_of_2(n))
    return out
