"""softmax: ``torch.softmax(x, dim=-1)`` over the rows of a matrix, output in ``x.dtype``."""
from __future__ import annotations

import torch

from .base import Problem, Shape, element_size, generator, randn, standard_adversarial, rowwise_shapes, with_nonfinite


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    return (randn((shape["M"], shape["N"]), dtype, device, gen, scale=2.0),)


def flops(shape: Shape) -> float:
    # max, subtract, exp, sum, divide: ~5 operations per element
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return 2.0 * shape["M"] * shape["N"] * element_size(dtype)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed + 7919)
    x = randn((shape["M"], shape["N"]), dtype, device, gen)
    # 5e3 * N(0,1) stays inside fp16's range; exp of the shifted values saturates to 0 or 1.
    cases = standard_adversarial(x, gen, large=5e3)
    # Masked rows (as in attention): about half the entries -inf, never a whole row.
    masked = x.clone()
    drop = torch.rand(x.shape, generator=gen, device=device) < 0.5
    drop[:, 0] = False
    masked[drop] = float("-inf")
    cases.append(("masked-inf", masked))
    # a NaN in every third row: the reference's row is all NaN (the denominator carries it)
    cases.append(("nan", with_nonfinite(x, gen)))
    return [(name, (t,)) for name, t in cases]


def make_problem() -> Problem:
    return Problem(
        kind="softmax",
        description="Softmax over the last dimension of a matrix (torch.softmax(x, -1)).",
        signature="kernel_fn(x[M,N]) -> out[M,N]  # softmax over the last dim, x.dtype output",
        dims=("M", "N"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=({"M": 4096, "N": 4096}, {"M": 8192, "N": 8192}, {"M": 4096, "N": 50257}),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        **rowwise_shapes(),
        adversarial_inputs=adversarial_inputs,
    )
