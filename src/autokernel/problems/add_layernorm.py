"""add_layernorm: residual add + LayerNorm (``F.layer_norm`` with weight and bias), both
results returned.

    s = x + residual                   (in x.dtype, as the model adds)
    out = F.layer_norm(s, (N,), weight, bias, eps)
    return out, s

Bytes saved by the fusion: see ``add_norm_common`` (5 MN -> 4 MN and one launch fewer).
Post-norm models (BERT) use only ``out``; they call it the same way and drop the sum.
"""
from __future__ import annotations

import torch

from . import layernorm
from .add_norm_common import add_in_dtype, adversarial_addends, bytes_moved, exact_split, split_sum
from .base import Problem, Shape, generator, rowwise_shapes


def reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5):
    s = add_in_dtype(x, residual)
    return layernorm.reference(s, weight, bias, eps), s


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    # the plain layernorm's draw (eps from what models use, a non-zero mean, rows near eps) for
    # the sum, split in two
    s, weight, bias, eps = layernorm.make_inputs(shape, dtype, device, seed)
    x, residual = split_sum(s, device, seed)
    return (x, residual, weight, bias, eps)


def flops(shape: Shape) -> float:
    return 8.0 * shape["M"] * shape["N"]


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    x, residual, weight, bias, eps = make_inputs(shape, dtype, device, seed + 1)
    gen = generator(device, seed + 7919)
    cases = adversarial_addends(x, residual, dtype, gen)
    # the plain layernorm's rows with a large mean, as an exact sum: without them a one-pass
    # variance (E[s^2] - E[s]^2) passed in every dtype
    for name, s, step in layernorm.large_mean_rows(shape, dtype, device, gen):
        cases.append((name, *exact_split(s, step, gen)))
    if shape["N"] == 1:  # the output is the bias whatever the sum (layernorm.ONE_COLUMN_CASES)
        cases = [c for c in cases if c[0] in layernorm.ONE_COLUMN_CASES]
    return [(name, (a, r, weight, bias, eps)) for name, a, r in cases]


def make_problem() -> Problem:
    return Problem(
        kind="add_layernorm",
        description="Residual add then LayerNorm with weight and bias; returns the normalised rows and the sum.",
        signature="kernel_fn(x[M,N], residual[M,N], weight[N], bias[N], eps=1e-5) -> (out[M,N], sum[M,N])  "
                  "# sum = x + residual; out = layer_norm(sum)",
        dims=("M", "N"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=lambda shape, dtype: bytes_moved(shape, dtype, 2),
        gpu_shapes=({"M": 4096, "N": 4096}, {"M": 16384, "N": 768}),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        **rowwise_shapes(),
        adversarial_inputs=adversarial_inputs,
    )
