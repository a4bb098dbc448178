"""swiglu_packed: SwiGLU on a packed projection, ``silu(gu[:, :N]) * gu[:, N:]``.

Phi-3 projects gate and up with one linear (``gate_up_proj``, D -> 2N), splits the result
with ``chunk(2, dim=-1)`` and computes ``up * silu(gate)``.  The halves are strided views, so
eager runs ``silu`` (reads MN, writes MN) then the multiply (reads 2 MN, writes MN): 5 MN e
and 2 launches.  Fused: read the packed tensor once, write out: 3 MN e, 1 launch (saves 40%).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import Problem, Shape, element_size, generator, randn, rowwise_shapes, standard_adversarial


def reference(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return up * F.silu(gate)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    gate = randn((shape["M"], shape["N"]), dtype, device, gen, scale=2.0)
    up = randn((shape["M"], shape["N"]), dtype, device, gen)
    return (torch.cat((gate, up), dim=-1),)


def flops(shape: Shape) -> float:
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return 3.0 * shape["M"] * shape["N"] * element_size(dtype)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    (gate_up,) = make_inputs(shape, dtype, device, seed + 1)
    gate, up = gate_up.chunk(2, dim=-1)
    large = 40.0 if dtype == torch.float16 else 1e4
    cases = [(f"gate-{name}", torch.cat((g, up), dim=-1))
             for name, g in standard_adversarial(gate.contiguous(), generator(device, seed + 7919), large=large)]
    very_negative = (gate.float().abs() * -(large * 10)).clamp(min=-6e4).to(dtype)
    cases.append(("gate-very-negative", torch.cat((very_negative, up), dim=-1)))
    return [(name, (t,)) for name, t in cases]


def make_problem() -> Problem:
    return Problem(
        kind="swiglu_packed",
        description="SwiGLU on a packed gate_up tensor: silu(first half) * second half (Phi-3's MLP).",
        signature="kernel_fn(gate_up[M,2N]) -> out[M,N]  # gate, up = gate_up.chunk(2, -1); up * silu(gate)",
        dims=("M", "N"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=({"M": 4096, "N": 8192}, {"M": 8192, "N": 14336}),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        **rowwise_shapes(),
        adversarial_inputs=adversarial_inputs,
    )
