"""geglu_packed: GEGLU on a packed projection, ``gelu(gu[:, :N]) * gu[:, N:]``, erf or tanh form.

ModernBERT projects both halves with one linear (``Wi``, D -> 2N), splits the result with
``chunk(2, dim=-1)`` and computes ``act(input) * gate`` (GELU on the first half).  The halves are
strided views, so eager runs the GELU (reads MN, writes MN) then the multiply (reads 2 MN,
writes MN): 5 MN e and 2 launches.  Fused: read the packed tensor once, write out: 3 MN e,
1 launch (saves 2 MN e, 40%: 2 * 128 * 128 * 4 = 128 KiB a call at the coverage test's
ModernBERT size in fp32, 2 * 8192 * 1152 * 2 = 36 MiB a layer for ModernBERT-base at 8K
tokens in bf16).
"""
from __future__ import annotations

import torch

from .base import Problem, Shape, element_size, generator, randn, rowwise_shapes, standard_adversarial
from .gelu import gelu, shapes


def alternating_flag(rowwise: dict[str, tuple[Shape, ...]]) -> dict[str, tuple[Shape, ...]]:
    """The row-wise CPU and edge shapes with ``tanh`` 0 and 1 by turns (erf first): both forms
    are judged, at half the interpreter time of every shape under both flags."""
    return {key: tuple(dict(s, tanh=i % 2) for i, s in enumerate(value)) for key, value in rowwise.items()}


def reference(gate_up: torch.Tensor, tanh: bool = False) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return gelu(gate, bool(tanh)) * up


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    gate = randn((shape["M"], shape["N"]), dtype, device, gen, scale=2.0)
    up = randn((shape["M"], shape["N"]), dtype, device, gen)
    return (torch.cat((gate, up), dim=-1), bool(shape["tanh"]))


def flops(shape: Shape) -> float:
    return 9.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return 3.0 * shape["M"] * shape["N"] * element_size(dtype)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gate_up, tanh = make_inputs(shape, dtype, device, seed + 1)
    gate, up = gate_up.chunk(2, dim=-1)
    large = 40.0 if dtype == torch.float16 else 1e4  # |gelu(gate) * up| must fit the dtype
    cases = [(f"gate-{name}", torch.cat((g, up), dim=-1))
             for name, g in standard_adversarial(gate.contiguous(), generator(device, seed + 7919), large=large)]
    very_negative = (gate.float().abs() * -(large * 10)).clamp(min=-6e4).to(dtype)
    cases.append(("gate-very-negative", torch.cat((very_negative, up), dim=-1)))
    return [(name, (t, tanh)) for name, t in cases]


def make_problem() -> Problem:
    return Problem(
        kind="geglu_packed",
        description=("GEGLU on a packed tensor: gelu(first half) * second half (ModernBERT's MLP), exact (tanh=0) "
                     "or tanh approximation (tanh=1)."),
        signature=("kernel_fn(gate_up[M,2N], tanh: bool) -> out[M,N]  # gate, up = gate_up.chunk(2, -1); "
                   "gelu(gate) * up"),
        dims=("M", "N", "tanh"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=shapes([(8192, 1152), (8192, 2624)], 0) + shapes([(8192, 1152)], 1),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        **alternating_flag(rowwise_shapes()),
        fixed_dims=("tanh",),
        adversarial_inputs=adversarial_inputs,
    )
