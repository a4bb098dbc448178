"""rotary: rotary position embedding in the ``rotate_half`` layout of Hugging Face models.

    out = x * cos + rotate_half(x) * sin,   rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])

x is [B, H, S, D]; cos and sin are [S, D] (broadcast over batch and heads) in x's dtype.
The two halves of cos/sin are drawn independently, so a kernel must read all of them.
"""
from __future__ import annotations

import math

import torch

from .base import Problem, Shape, element_size, generator, randn, standard_adversarial


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    x = randn((shape["B"], shape["H"], shape["S"], shape["D"]), dtype, device, gen)
    angle = (torch.rand((shape["S"], shape["D"]), generator=gen, device=device) * 2 - 1) * math.pi
    return (x, torch.cos(angle).to(dtype), torch.sin(angle).to(dtype))


def flops(shape: Shape) -> float:
    return 3.0 * shape["B"] * shape["H"] * shape["S"] * shape["D"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    n_x = shape["B"] * shape["H"] * shape["S"] * shape["D"]
    return float((2 * n_x + 2 * shape["S"] * shape["D"]) * element_size(dtype))


def _power_of_two_table(shape: Shape, dtype: torch.dtype, device: str, gen: torch.Generator) -> torch.Tensor:
    """±2^-k (k in 0..2): x * table is exact in every dtype, so eager's only rounding is
    the final add, which keeps its error relative to the result even when it cancels."""
    k = torch.randint(0, 3, (shape["S"], shape["D"]), generator=gen, device=device).float()
    sign = torch.randint(0, 2, (shape["S"], shape["D"]), generator=gen, device=device).float() * 2 - 1
    return (sign * torch.pow(2.0, -k)).to(dtype)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed + 7919)
    x, _, _ = make_inputs(shape, dtype, device, seed + 1)
    cos = _power_of_two_table(shape, dtype, device, gen)
    sin = _power_of_two_table(shape, dtype, device, gen)
    # |out| <= |x1| + |x2|: keep 2 * 6 * large inside fp16
    large = 5e3 if dtype == torch.float16 else 1e6
    cases = [(name, (t, cos, sin)) for name, t in standard_adversarial(x, gen, large=large)]
    # x in the layout of ``projection_layout``: a kernel must read it right, because the model
    # integration passes such q/k as they are
    heads_inner = x.transpose(1, 2).contiguous().transpose(1, 2)
    return cases + [("projection-layout", (heads_inner, cos, sin))]


def projection_layout(x: torch.Tensor) -> bool:
    """q/k as an attention projection makes them: view(B, S, H, D).transpose(1, 2), strided in
    B, H and S.  Passed to rotary kernels as it is, it spares a copy of q and k, and one of the
    attention output after them."""
    return x.dim() == 4 and not x.is_contiguous() and x.transpose(1, 2).is_contiguous()


def _shape(b: int, h: int, s: int, d: int) -> Shape:
    return {"B": b, "H": h, "S": s, "D": d}


def rotary_setting() -> dict:
    """What the rotary kinds share: x[B,H,S,D] and tables [S,D], their inputs, costs and shapes."""
    return dict(
        dims=("B", "H", "S", "D"),
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=(_shape(2, 32, 2048, 128), _shape(1, 32, 8192, 128)),
        cpu_shapes=(_shape(1, 2, 16, 64), _shape(2, 3, 7, 64)),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        gpu_edge_shapes=(_shape(1, 1, 1, 128), _shape(1, 7, 1, 128), _shape(3, 5, 37, 128), _shape(1, 1, 4099, 128)),
        cpu_edge_shapes=(_shape(1, 1, 1, 64), _shape(1, 7, 1, 64), _shape(3, 1, 5, 64)),
        fixed_dims=("D",),
        passthrough_layout=projection_layout,
    )


def make_problem() -> Problem:
    return Problem(
        kind="rotary",
        description="Rotary position embedding (rotate_half layout) applied to x[B,H,S,D] with cos/sin[S,D].",
        signature="kernel_fn(x[B,H,S,D], cos[S,D], sin[S,D]) -> out[B,H,S,D]  # x*cos + rotate_half(x)*sin",
        reference=reference,
        adversarial_inputs=adversarial_inputs,
        **rotary_setting(),
    )
