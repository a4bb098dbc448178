"""geglu: GELU gating, ``gelu(gate) * up`` (Gemma's MLP uses the tanh form), output in the dtype.

Bytes: separate, ``gelu`` reads MN and writes MN, then ``* up`` reads 2 MN and writes MN:
5 MN e and 2 launches.  Fused: read gate and up, write out: 3 MN e, 1 launch (saves 40%).
"""
from __future__ import annotations

import torch

from .base import Problem, Shape, element_size, generator, randn, rowwise_shapes, standard_adversarial
from .gelu import gelu, shapes, with_flag


def reference(gate: torch.Tensor, up: torch.Tensor, tanh: bool = True) -> torch.Tensor:
    return gelu(gate, bool(tanh)) * up


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    gate = randn((shape["M"], shape["N"]), dtype, device, gen, scale=2.0)
    up = randn((shape["M"], shape["N"]), dtype, device, gen)
    return (gate, up, bool(shape["tanh"]))


def flops(shape: Shape) -> float:
    return 9.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return 3.0 * shape["M"] * shape["N"] * element_size(dtype)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gate, up, tanh = make_inputs(shape, dtype, device, seed + 1)
    gen = generator(device, seed + 7919)
    large = 40.0 if dtype == torch.float16 else 1e4  # |gelu(gate) * up| must fit the dtype
    cases = [(f"gate-{name}", (g, up, tanh)) for name, g in standard_adversarial(gate, gen, large=large)]
    cases.append(("gate-very-negative", ((gate.float().abs() * -(large * 10)).clamp(min=-6e4).to(dtype), up, tanh)))
    return cases


def make_problem() -> Problem:
    return Problem(
        kind="geglu",
        description="GELU gating gelu(gate) * up, exact (tanh=0) or tanh approximation (tanh=1).",
        signature="kernel_fn(gate[M,N], up[M,N], tanh: bool) -> out[M,N]  # gelu(gate) * up",
        dims=("M", "N", "tanh"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=shapes([(4096, 16384), (8192, 24576)], 1),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        **with_flag(rowwise_shapes(), (1, 0)),
        fixed_dims=("tanh",),
        adversarial_inputs=adversarial_inputs,
    )
