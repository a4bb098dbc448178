"""layernorm: ``F.layer_norm(x, (N,), weight, bias, eps)`` over the last dim, x.dtype output.

``eps`` is drawn per input draw: every other draw from what LayerNorm models use (``EPS_CHOICES``),
the others log-uniformly from ``EPS_RANGE``; one row in four is scaled so that its variance
(~4e-6) is near eps: a kernel that fixes eps, or reads it as a choice of a few values, fails.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import Problem, Shape, choose_or_draw, element_size, generator, randn, rowwise_shapes, small_rows, standard_adversarial, with_nonfinite

# GPT-2, OPT, LLaMA-style layer norms 1e-5; ViT, T5-style 1e-6; BERT 1e-12
EPS_CHOICES = (1e-5, 1e-6, 1e-12)
EPS_RANGE = (1e-12, 1e-4)  # DeBERTa's 1e-7 among them
SMALL_ROW_SCALE = 2e-3


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    # a non-zero mean, so that a kernel computing E[x^2] - E[x]^2 loses digits
    x = small_rows(randn((shape["M"], shape["N"]), dtype, device, gen, offset=0.5), SMALL_ROW_SCALE)
    weight = randn((shape["N"],), dtype, device, gen, scale=0.1, offset=1.0)
    bias = randn((shape["N"],), dtype, device, gen, scale=0.1)
    return (x, weight, bias, choose_or_draw(EPS_CHOICES, *EPS_RANGE, seed))


def flops(shape: Shape) -> float:
    # mean, centred squares, normalise, scale and shift: ~7 per element
    return 7.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return float((2 * shape["M"] * shape["N"] + 2 * shape["N"]) * element_size(dtype))


def large_mean_rows(shape: Shape, dtype: torch.dtype, device: str, gen: torch.Generator) -> list[tuple[str, torch.Tensor, float]]:
    """Rows whose mean is large against their spread, as (name, rows, step): every value a
    multiple of ``step``, exact in the dtype (two addends of such steps sum exactly).

    ``offset-mean``: a common offset 100x the spread; E[x^2] - E[x]^2 in fp32 loses ~1e-3 of the
    variance, which only fp32's tolerance shows.  ``constant-rows`` (bf16, fp16): a constant the
    dtype holds at unit spacing (255 in bf16, 1536 in fp16) with a few elements one off it (one
    in 64 for bf16, 16 for fp16; at least one a row): the variance is below fp32's rounding of
    E[x^2], so a one-pass variance is wrong by tens of percent or entirely (a kernel that used it
    for bf16 and fp16 alone passed), while fp32's rounding of the mean stays within the dtype's
    tolerance (not within fp32's: the mean of 1536s, rounded, is off by 1e-4 of the spread there)."""
    m, n = shape["M"], shape["N"]
    step = 0.5 if dtype == torch.bfloat16 else 0.25  # representable next to 100 in the dtype
    base = randn((m, n), torch.float32, device, gen)
    rows = [("offset-mean", (100.0 + torch.round(base / step) * step).to(dtype), step)]
    if dtype not in (torch.bfloat16, torch.float16):
        return rows
    const, share = (255.0, 1 / 64) if dtype == torch.bfloat16 else (1536.0, 1 / 16)
    sign = torch.where(torch.rand((m, n), generator=gen, device=device) < 0.5, -1.0, 1.0)
    off = torch.rand((m, n), generator=gen, device=device) < share
    if n:
        off[torch.arange(m, device=device), torch.randint(0, n, (m,), generator=gen, device=device)] = True
    rows.append(("constant-rows", (const + sign * off.float()).to(dtype), 1.0))
    return rows


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed + 7919)
    x, weight, bias, eps = make_inputs(shape, dtype, device, seed + 1)
    large = 5e3 if dtype == torch.float16 else 1e6
    cases = standard_adversarial(x, gen, large=large)
    cases += [(name, t) for name, t, _ in large_mean_rows(shape, dtype, device, gen)]
    cases.append(("nan", with_nonfinite(x, gen)))  # the row's mean carries it: the row is NaN
    if shape["N"] == 1:
        cases = [c for c in cases if c[0] in ONE_COLUMN_CASES]
    return [(name, (t, weight, bias, eps)) for name, t in cases]


# Rows of one value (the N = 1 edge shape): the output is the bias whatever x, so the cases test
# nothing there, and eager's E[x^2] - E[x]^2 turns their values into garbage (bf16: a relative
# error of 279 where the bias is exact; fp16: 45x the bound on the NaN case's other rows).
ONE_COLUMN_CASES: tuple[str, ...] = ()


def make_problem() -> Problem:
    return Problem(
        kind="layernorm",
        description="LayerNorm over the last dim with weight and bias (F.layer_norm).",
        signature="kernel_fn(x[M,N], weight[N], bias[N], eps) -> out[M,N]  # eps varies (1e-5, 1e-6, 1e-12, or in [1e-12, 1e-4])",
        dims=("M", "N"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=({"M": 4096, "N": 4096}, {"M": 16384, "N": 4096}),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        **rowwise_shapes(),
        adversarial_inputs=adversarial_inputs,
    )
