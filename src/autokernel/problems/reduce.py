"""reduce: row sums ``x.sum(-1)`` with fp32 accumulation, output in ``x.dtype`` (torch.sum).

The adversarial values are chosen so that *every* fp32 summation order is exact (small
integers times a power of two per row): the reference is then exact whatever order the
reference and the kernel add in, and only the final rounding to the dtype remains.  A kernel
that accumulates in fp16/bf16 fails 'large-cancelling': rows of ±60000 whose partial sums
overflow fp16 (or lose the small terms in bf16) while the true sum is small.
"""
from __future__ import annotations

import math

import torch

from .base import Problem, Shape, Tolerance, element_size, generator, randn, rowwise_shapes, with_nonfinite


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    """Normal values around a mean of 1 (less for long fp16 rows: ``_mean``).  Zero-mean rows
    sum to near zero now and then, and two correct fp32 sums of the same row in different
    orders then differ by more than 1e-5 of the (tiny) result: a single-row edge shape failed a
    correct kernel on ~1% of draws.  Cancellation itself is judged on exact values
    (``adversarial_inputs``)."""
    gen = generator(device, seed)
    return (randn((shape["M"], shape["N"]), dtype, device, gen, offset=_mean(shape["N"], dtype)),)


def _mean(n: int, dtype: torch.dtype) -> float:
    """1, or less where n ones would overflow the output dtype: fp16 ends at 65504, so a row of
    70001 values around 1 sums to inf in the dtype, and no kernel can match its fp32 reference
    (the GPU edge shape 1x70001 failed the starter).  Rows then sum to about 8192."""
    return 1.0 if dtype != torch.float16 else min(1.0, 8192.0 / max(n, 1))


def flops(shape: Shape) -> float:
    return float(shape["M"] * shape["N"])


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    size = element_size(dtype)
    return float(shape["M"] * shape["N"] * size + shape["M"] * size)


def _exact_rows(m: int, n: int, gen: torch.Generator, device: str, exps: torch.Tensor) -> torch.Tensor:
    """Integers in ±[1, 255] times 2**exps[row]: any fp32 summation order is exact while
    sum(|k|) < 2**24, i.e. for rows up to ~65000 long."""
    k = torch.randint(1, 256, (m, n), generator=gen, device=device).float()
    sign = torch.randint(0, 2, (m, n), generator=gen, device=device).float() * 2 - 1
    return k * sign * torch.pow(2.0, exps.float())


def _fit_exp(n: int, dtype: torch.dtype) -> int:
    """Scale exponent for 'large' rows: fp16 row sums (~150*sqrt(n)*2**e per sigma) and a
    dominant 255*2**e must stay far below 65504; fp32/bf16 have room to spare."""
    if dtype != torch.float16:
        return 20
    return math.floor(math.log2(30000.0 / max(900.0 * math.sqrt(max(n, 1)), 255.0)))


def _large_cancelling(m: int, n: int, gen: torch.Generator, device: str) -> torch.Tensor:
    """n//4 entries of +60000 and n//4 of -60000 at random places in each row, small integers
    elsewhere: the true sum is small and fits every dtype, but a running sum in fp16 passes
    65504 (inf) and one in bf16 loses the small terms."""
    rows = torch.randint(1, 9, (m, n), generator=gen, device=device).float()
    rows *= torch.randint(0, 2, (m, n), generator=gen, device=device).float() * 2 - 1
    pairs = n // 4
    if pairs:
        cols = torch.rand((m, n), generator=gen, device=device).argsort(dim=1)[:, : 2 * pairs]
        big = torch.cat([torch.full((pairs,), 60000.0, device=device),
                         torch.full((pairs,), -60000.0, device=device)])
        rows.scatter_(1, cols, big.expand(m, -1).contiguous())
    return rows


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed + 7919)
    m, n = shape["M"], shape["N"]
    e = _fit_exp(n, dtype)
    full = lambda v: torch.full((m, 1), v, device=device)  # noqa: E731
    dom = _exact_rows(m, n, gen, device, full(e - 8))
    dom[torch.arange(m, device=device), torch.randint(0, n, (m,), generator=gen, device=device)] = 255.0 * 2.0 ** e
    cases = [
        ("large", _exact_rows(m, n, gen, device, full(e))),
        ("tiny", _exact_rows(m, n, gen, device, full(-20))),
        ("mixed-scales", _exact_rows(m, n, gen, device, torch.randint(-12, e + 1, (m, 1), generator=gen, device=device))),
        ("dominant", dom),
        ("large-cancelling", _large_cancelling(m, n, gen, device)),
    ]
    # NaN, +inf and -inf in every third row: each carries into its row's sum
    plain = _exact_rows(m, n, gen, device, full(0))
    cases.append(("nonfinite", with_nonfinite(plain, gen, (float("nan"), float("inf"), float("-inf")))))
    return [(name, (x.to(dtype),)) for name, x in cases]


def make_problem() -> Problem:
    return Problem(
        kind="reduce",
        description="Row sums of a matrix (x.sum(-1)), accumulated in fp32, output in x.dtype.",
        signature="kernel_fn(x[M,N]) -> out[M]  # out = x.sum(-1), fp32 accumulation, x.dtype output",
        dims=("M", "N"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=({"M": 8192, "N": 8192}, {"M": 65536, "N": 1024}),
        dtypes=(torch.float32, torch.bfloat16, torch.float16),
        tolerances={
            # fp32: two fp32 sums of ~10^4 normal values in different orders differ by ~1e-5.
            torch.float32: Tolerance(atol=2e-4, rtol=1e-4, max_rel_norm=1e-5),
            # Low precision: one rounding of the fp32 sum to the dtype (plus the reference's own).
            torch.float16: Tolerance(atol=2e-3, rtol=2e-3, max_rel_norm=1e-3),
            torch.bfloat16: Tolerance(atol=1.6e-2, rtol=1e-2, max_rel_norm=1e-2),
        },
        **rowwise_shapes(),
        adversarial_inputs=adversarial_inputs,
    )
