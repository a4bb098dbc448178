"""swiglu: the element-wise part of a SwiGLU MLP, ``silu(gate) * up``, output in the dtype."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import Problem, Shape, element_size, generator, randn, standard_adversarial, rowwise_shapes


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    gate = randn((shape["M"], shape["N"]), dtype, device, gen, scale=2.0)
    up = randn((shape["M"], shape["N"]), dtype, device, gen)
    return (gate, up)


def flops(shape: Shape) -> float:
    # exp, add, divide, two multiplies: ~5 per element
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return 3.0 * shape["M"] * shape["N"] * element_size(dtype)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed + 7919)
    gate, up = make_inputs(shape, dtype, device, seed + 1)
    # The product of two large values must still fit: |gate * up| <= ~6*40 * 6*40 in fp16.
    large = 40.0 if dtype == torch.float16 else 1e4
    gate_cases = standard_adversarial(gate, gen, large=large)
    up_cases = standard_adversarial(up, gen, large=large)
    cases = [(f"gate-{name}", (g, up)) for name, g in gate_cases]
    # (both tiny would make products that are subnormal in fp16: no dtype result to judge)
    cases += [(f"both-{name}", (g, u)) for (name, g), (_, u) in zip(gate_cases, up_cases) if name != "tiny"]
    # Very negative gates: silu -> -0 through exp overflow, which must not give NaN.
    cases.append(("gate-very-negative", ((gate.float().abs() * -(large * 10)).clamp(min=-6e4).to(dtype), up)))
    return cases


def make_problem() -> Problem:
    return Problem(
        kind="swiglu",
        description="Element-wise SwiGLU activation silu(gate) * up.",
        signature="kernel_fn(gate[M,N], up[M,N]) -> out[M,N]  # silu(gate) * up",
        dims=("M", "N"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=({"M": 4096, "N": 11008}, {"M": 8192, "N": 14336}),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        **rowwise_shapes(),
        adversarial_inputs=adversarial_inputs,
    )
