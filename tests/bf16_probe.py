"""bf16 arithmetic in one Triton kernel against torch's bf16 ops (for test_interpreter_half.py,
under the worker's interpreter, and benchmarks/half_precision_gpu.py, on a GPU)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _bf16_ops(x_ptr, y_ptr, out_ptr, red_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    x, y = tl.load(x_ptr + r), tl.load(y_ptr + r)
    tl.store(out_ptr + r, x + y)
    tl.store(out_ptr + N + r, x * y - x)
    tl.store(out_ptr + 2 * N + r, -x)
    tl.store(out_ptr + 3 * N + r, tl.where(x < y, x, y))
    tl.store(out_ptr + 4 * N + r, tl.fma(x, y, x))
    tl.store(red_ptr, tl.max(x, axis=0))
    tl.store(red_ptr + 1, tl.min(x, axis=0))
    tl.store(red_ptr + 2, tl.sum(x, axis=0))


def bf16_checks(device: str) -> dict[str, bool]:
    """Each op of the kernel on 64 bf16 values: whether it equals torch's (the sum: within 2% of
    the absolute sum, as a sum in bf16 in any order is)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(64, generator=g) * 4).bfloat16().to(device)
    y = (torch.randn(64, generator=g) * 4).bfloat16().to(device)
    out = torch.empty(5 * 64, dtype=torch.bfloat16, device=device)
    red = torch.empty(3, dtype=torch.bfloat16, device=device)
    _bf16_ops[(1,)](x, y, out, red, 64)
    got = out.view(5, 64)
    # x * y - x: torch rounds the product, then the difference; a GPU build may contract the two
    # into one fma, rounded once (on an H100, 2026-12-06, the kernel's differed from torch's):
    # either is right
    fused = (x.double() * y - x).bfloat16()
    return {"x+y": torch.equal(got[0], x + y), "x*y-x": torch.equal(got[1], x * y - x) or torch.equal(got[1], fused),
            "-x": torch.equal(got[2], -x),
            "where": torch.equal(got[3], torch.minimum(x, y)),
            "fma": torch.equal(got[4], (x.double() * y + x).bfloat16()),
            "max": red[0].item() == x.max().item(), "min": red[1].item() == x.min().item(),
            "sum": abs(red[2].item() - x.double().sum().item()) <= 0.02 * x.double().abs().sum().item()}
