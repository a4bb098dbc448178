"""rmsnorm: Hugging Face LLaMA RMSNorm.

    h = x.float();  h = h * rsqrt(mean(h**2, -1) + eps);  out = weight * h.to(x.dtype)

The normalisation runs in fp32 (or in the input's precision when that is higher, so the
float64 ground truth stays float64), the result is cast to x.dtype, then multiplied by the
weight (same dtype as x).

``eps`` is drawn per input draw: every other draw from what RMSNorm models use (``EPS_CHOICES``),
the others log-uniformly from ``EPS_RANGE``; one row in four is scaled so that its mean square
(4e-6) is near eps: a kernel that fixes eps, or reads it as a choice of a few values, fails.
"""
from __future__ import annotations

import torch

from .base import Problem, Shape, choose_or_draw, element_size, generator, randn, rowwise_shapes, small_rows, standard_adversarial, with_nonfinite

# LLaMA-2 / Mistral / Phi-3 use 1e-5, LLaMA-1/3, Qwen2 and Gemma 1e-6; T5 1e-6
EPS_CHOICES = (1e-6, 1e-5)
EPS_RANGE = (1e-7, 1e-4)
SMALL_ROW_SCALE = 2e-3


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    x = small_rows(randn((shape["M"], shape["N"]), dtype, device, gen), SMALL_ROW_SCALE)
    weight = randn((shape["N"],), dtype, device, gen, scale=0.1, offset=1.0)
    return (x, weight, choose_or_draw(EPS_CHOICES, *EPS_RANGE, seed))


def flops(shape: Shape) -> float:
    # square+add for the mean, then scale and weight multiply: ~4 per element
    return 4.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return float((2 * shape["M"] * shape["N"] + shape["N"]) * element_size(dtype))


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed + 7919)
    x, weight, eps = make_inputs(shape, dtype, device, seed + 1)
    # mean(x**2) is taken in fp32, so only the input itself must fit the dtype.
    large = 5e3 if dtype == torch.float16 else 1e6
    cases = standard_adversarial(x, gen, large=large)
    cases.append(("nan", with_nonfinite(x, gen)))  # the row's mean square carries it: the row is NaN
    return [(name, (t, weight, eps)) for name, t in cases]


def make_problem() -> Problem:
    return Problem(
        kind="rmsnorm",
        description="RMSNorm over the last dim, Hugging Face LLaMA semantics (fp32 inside, cast, then * weight).",
        signature="kernel_fn(x[M,N], weight[N], eps) -> out[M,N]  # weight * (x.float() * rsqrt(mean(x.float()**2) + eps)).to(x.dtype); eps varies (1e-6, 1e-5, or in [1e-7, 1e-4])",
        dims=("M", "N"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=({"M": 4096, "N": 4096}, {"M": 16384, "N": 4096}, {"M": 4096, "N": 8192}),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        **rowwise_shapes(),
        adversarial_inputs=adversarial_inputs,
    )
