"""layernorm: ``F.layer_norm(x, (N,), weight, bias, eps)`` over the last dim, x.dtype output.

``eps`` is drawn per input draw from what LayerNorm models use (``EPS_CHOICES``), and one row in
four is scaled so that its variance (~4e-6) is near eps: a kernel that fixes eps fails.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import Problem, Shape, choose, element_size, generator, randn, rowwise_shapes, small_rows, standard_adversarial, with_nonfinite

# GPT-2, OPT, LLaMA-style layer norms 1e-5; ViT, T5-style 1e-6; BERT 1e-12
EPS_CHOICES = (1e-5, 1e-6, 1e-12)
SMALL_ROW_SCALE = 2e-3


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    # a non-zero mean, so that a kernel computing E[x^2] - E[x]^2 loses digits
    x = small_rows(randn((shape["M"], shape["N"]), dtype, device, gen, offset=0.5), SMALL_ROW_SCALE)
    weight = randn((shape["N"],), dtype, device, gen, scale=0.1, offset=1.0)
    bias = randn((shape["N"],), dtype, device, gen, scale=0.1)
    return (x, weight, bias, choose(EPS_CHOICES, seed))


def flops(shape: Shape) -> float:
    # mean, centred squares, normalise, scale and shift: ~7 per element
    return 7.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return float((2 * shape["M"] * shape["N"] + 2 * shape["N"]) * element_size(dtype))


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed + 7919)
    x, weight, bias, eps = make_inputs(shape, dtype, device, seed + 1)
    large = 5e3 if dtype == torch.float16 else 1e6
    cases = standard_adversarial(x, gen, large=large)
    # A common offset 100x the spread: E[x^2] - E[x]^2 in fp32 loses ~1e-3 of the variance.
    step = 0.5 if dtype == torch.bfloat16 else 0.25  # representable next to 100 in the dtype
    base = randn(x.shape, torch.float32, device, gen)
    cases.append(("offset-mean", (100.0 + torch.round(base / step) * step).to(dtype)))
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
        signature="kernel_fn(x[M,N], weight[N], bias[N], eps) -> out[M,N]  # eps varies (1e-5, 1e-6, 1e-12)",
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
