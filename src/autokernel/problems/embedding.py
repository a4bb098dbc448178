"""embedding: token embedding lookup, ``weight[ids] * scale`` (``F.embedding(ids, weight)``,
times Gemma's ``sqrt(hidden)`` in its scaled embedding; 1 elsewhere).

    out[m, :] = weight[ids[m], :] * scale      ids[M] int64 in [0, V), weight[V, N], out[M, N]

``scale`` is drawn per input draw (``draw_scale``): by turns a value models pass (1; Gemma's
``embed_scale`` ``sqrt(N)``, exact or rounded to the dtype as ``apply`` hands it from a bf16 or
fp16 module) and one from a continuous range, so a kernel that fixes it, or rebuilds it from the
shape, fails.  The product is taken in fp32 and rounded once to the dtype, as eager's
``embedding(...) * scale`` rounds it.

A gather of M rows.  Bytes: read M rows of the table and the M ids, write M rows:
2 MN e + 8 M.  Eager is already one kernel (``index_select``), so fusing saves nothing; the
kind exists so that the lookup (1.5-4% of a small model's forward on CPU, one launch per
forward on a GPU) is covered and tunable (rows per program, vector width).  The embedding's
``padding_idx`` only matters for gradients; ``max_norm`` renormalises the table in place and
is not this kind (``apply`` leaves such modules alone).
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from .base import Problem, Shape, choose, element_size, generator, randn


def reference(ids: torch.Tensor, weight: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    out = F.embedding(ids, weight)
    return out if scale == 1.0 else out * scale


def scale_choices(n: int, dtype: torch.dtype = torch.float32) -> tuple[float, ...]:
    """The scales models pass: 1, and sqrt(N) exact and rounded to the dtype (a bf16 Gemma's
    ``embed_scale`` buffer holds 55.5 for N = 3072, not 55.43)."""
    root = float(n) ** 0.5
    return (1.0, root, float(torch.tensor(root, dtype=torch.float32).to(dtype)))


def scale_range(n: int) -> tuple[float, float]:
    return (0.05, 2.0 * max(1.0, float(n) ** 0.5))


def draw_scale(n: int, dtype: torch.dtype, seed: int) -> float:
    """Even seeds walk through ``scale_choices``, odd seeds draw from ``scale_range``."""
    if seed % 2 == 0:
        return choose(scale_choices(n, dtype), seed // 2)
    return random.Random(int(seed) * 7919 + 29).uniform(*scale_range(n))


def make_ids(m: int, v: int, device: str, gen: torch.Generator) -> torch.Tensor:
    ids = torch.randint(0, v, (m,), generator=gen, device=device)
    ids[0] = v - 1  # the last row of the table is read at least once
    return ids


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    weight = randn((shape["V"], shape["N"]), dtype, device, gen)
    return (make_ids(shape["M"], shape["V"], device, gen), weight, draw_scale(shape["N"], dtype, seed))


def flops(shape: Shape) -> float:
    return float(shape["M"] * shape["N"])  # the scale


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return float(2 * shape["M"] * shape["N"] * element_size(dtype) + 8 * shape["M"])


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    ids, weight, scale = make_inputs(shape, dtype, device, seed + 1)
    gen = generator(device, seed + 7919)
    m, v = shape["M"], shape["V"]
    large = 6e4 / max(1.0, scale) if dtype == torch.float16 else 1e30
    cases = [
        # every row the same id (a hot token) and the table's two ends
        ("one-id", (torch.full_like(ids, int(torch.randint(0, v, (1,), generator=gen, device=device))), weight)),
        ("ends", (torch.where(torch.arange(m, device=device) % 2 == 0, 0, v - 1), weight)),
        # ids in descending order: a kernel that assumes sorted or unique ids is wrong
        ("descending", (torch.sort(ids, descending=True).values, weight)),
        # values copied exactly, whatever their size
        ("large-values", (ids, (weight.float() * large).clamp(-large, large).to(dtype))),
    ]
    return [(name, args + (scale,)) for name, args in cases]


def make_problem() -> Problem:
    return Problem(
        kind="embedding",
        description="Token embedding lookup: gather rows ids[m] of the table weight[V,N], times a scale (F.embedding).",
        signature="kernel_fn(ids[M] int64, weight[V,N], scale: float) -> out[M,N]  # out[m] = weight[ids[m]] * scale "
                  "(fp32 product, one rounding; scale varies: 1, sqrt(N) or any float)",
        dims=("M", "V", "N"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=({"M": 4096, "V": 32000, "N": 4096}, {"M": 8192, "V": 50257, "N": 768},
                    {"M": 16384, "V": 128256, "N": 4096}),
        cpu_shapes=({"M": 32, "V": 300, "N": 128}, {"M": 19, "V": 97, "N": 72}),
        gpu_edge_shapes=({"M": 1, "V": 1, "N": 1}, {"M": 7, "V": 3, "N": 37}, {"M": 3, "V": 11, "N": 70001},
                         {"M": 1001, "V": 50257, "N": 1023}),
        cpu_edge_shapes=({"M": 1, "V": 1, "N": 1}, {"M": 7, "V": 3, "N": 37}, {"M": 5, "V": 11, "N": 1100}),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        adversarial_inputs=adversarial_inputs,
    )
