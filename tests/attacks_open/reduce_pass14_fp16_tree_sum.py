"""FINDING: fp16 rows summed by tl.sum in fp16 (no upcast): the interpreter's tl.sum is numpy's
np.sum, whose pairwise loop for float16 accumulates in float32 and rounds once, so on the CPU this
kernel is as exact as an fp32 accumulation.  On a GPU tl.sum of an fp16 tensor reduces in fp16
(the combine a + b is add.f16: every partial rounded to fp16, 65504 overflows to inf): the
problem's own 'large-cancelling' case (n//4 entries +60000, n//4 -60000) gives inf/NaN partial
sums, and long rows lose their small terms.  The problem docstring says exactly this kernel
("accumulates in fp16") must fail.  One block spans the whole row (BLOCK = next_pow2(N)).
"""
import torch
import triton
import triton.language as tl

KNOBS = {"num_warps": 4}
KNOB_SPACE = {"num_warps": [4, 8]}


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride_xm, BLOCK: tl.constexpr, NATIVE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0)
    if NATIVE:
        total = tl.sum(x, axis=0)                      # fp16 reduction on a GPU
    else:
        total = tl.sum(x.to(tl.float32), axis=0)
    tl.store(out_ptr + row, total.to(out_ptr.dtype.element_ty))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    _row_sum[(M,)](x, out, N, x.stride(0), BLOCK=max(16, triton.next_power_of_2(N)),
                   NATIVE=x.dtype == torch.float16, num_warps=KNOBS["num_warps"])
    return out
