"""gelu: GELU over a tensor, exact (erf) or the tanh approximation, output in the dtype.

    tanh=0:  x * 0.5 * (1 + erf(x / sqrt(2)))                         (F.gelu(x))
    tanh=1:  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))     (F.gelu(x, approximate="tanh"))

Bytes: 2 MN e (read x, write y).  What it saves depends on how the model spells it: ``F.gelu``
is already one kernel (no bytes saved; the kind exists so that the activation is covered and
tunable), while GPT-2's ``NewGELUActivation`` writes it out as eight element-wise ops
(pow, mul, add, mul, tanh, add, mul, mul), each reading and writing MN elements: about
19 MN e and 8 launches, against 2 MN e and 1 launch fused (9.5x fewer bytes).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .base import Problem, Shape, element_size, generator, randn, rowwise_shapes, standard_adversarial

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: torch.Tensor, tanh: bool) -> torch.Tensor:
    return F.gelu(x, approximate="tanh" if tanh else "none")


def reference(x: torch.Tensor, tanh: bool = False) -> torch.Tensor:
    return gelu(x, bool(tanh))


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    x = randn((shape["M"], shape["N"]), dtype, device, generator(device, seed), scale=2.0)
    return (x, bool(shape["tanh"]))


def flops(shape: Shape) -> float:
    return 8.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return 2.0 * shape["M"] * shape["N"] * element_size(dtype)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    x, tanh = make_inputs(shape, dtype, device, seed + 1)
    large = 6e4 if dtype == torch.float16 else 1e6
    cases = standard_adversarial(x, generator(device, seed + 7919), large=large)
    # x * 6e4 passes fp16's range where |x| > 1.09: clamped, not inf (gelu(inf) is NaN in torch's
    # AVX-512 float kernels and inf elsewhere, so eager itself failed the case on such CPUs)
    cases = [(name, t.float().clamp(-large, large).to(dtype)) for name, t in cases]
    # very negative inputs: gelu -> -0, where tanh(...) -> -1 and erf -> -1 must not give NaN
    cases.append(("very-negative", (x.float().abs() * -(large / 10)).clamp(min=-6e4).to(dtype)))
    return [(name, (t, tanh)) for name, t in cases]


def shapes(m_n: list[tuple[int, int]], tanh: int) -> tuple[Shape, ...]:
    return tuple({"M": m, "N": n, "tanh": tanh} for m, n in m_n)


def with_flag(rowwise: dict[str, tuple[Shape, ...]], flags: tuple[int, ...]) -> dict[str, tuple[Shape, ...]]:
    """The row-wise CPU and edge shapes, once per value of the ``tanh`` flag."""
    return {key: tuple(dict(s, tanh=f) for f in flags for s in value) for key, value in rowwise.items()}


def make_problem() -> Problem:
    return Problem(
        kind="gelu",
        description="GELU activation, exact (erf, tanh=0) or tanh approximation (tanh=1).",
        signature="kernel_fn(x[M,N], tanh: bool) -> out[M,N]  # F.gelu(x, approximate='tanh' if tanh else 'none')",
        dims=("M", "N", "tanh"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=shapes([(4096, 3072), (16384, 3072)], 1) + shapes([(4096, 3072)], 0),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        **with_flag(rowwise_shapes(), (0, 1)),
        fixed_dims=("tanh",),
        adversarial_inputs=adversarial_inputs,
    )
