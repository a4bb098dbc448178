"""rotary_interleaved: rotary position embedding on interleaved pairs (Cohere's, GPT-J's layout).

    out[..., 2i]   = x[..., 2i] * cos[..., 2i]     - x[..., 2i+1] * sin[..., 2i]
    out[..., 2i+1] = x[..., 2i+1] * cos[..., 2i+1] + x[..., 2i] * sin[..., 2i+1]

that is ``x * cos + rotate_pairs(x) * sin`` with ``rotate_pairs(x) = stack(-x[..., 1::2],
x[..., ::2]).flatten(-2)``.  x is [B, H, S, D]; cos and sin are [S, D] (broadcast over batch and
heads) in x's dtype.  Models pass each angle twice (``repeat_interleave(freqs, 2)``); here every
element of cos/sin is drawn on its own, so a kernel must read all of them.
"""
from __future__ import annotations

import torch

from .base import Problem, Shape
from .rotary import adversarial_inputs as rotary_cases
from .rotary import make_inputs, rotary_setting


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_pairs(x) * sin


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    """``rotary``'s cases (exact power-of-two tables, magnitudes, the projection layout), and x with
    its odd elements zero: the half-split layout's partner of each element differs from the
    pair's, so a kernel that rotates halves fails every case; this one makes a kernel also place
    the rotated even elements right."""
    cases = rotary_cases(shape, dtype, device, seed)
    _, cos, sin = cases[0][1]
    evens_only, _, _ = make_inputs(shape, dtype, device, seed + 1)  # the x of rotary's cases
    evens_only[..., 1::2] = 0
    return cases + [("odd-elements-zero", (evens_only, cos, sin))]


def make_problem() -> Problem:
    return Problem(
        kind="rotary_interleaved",
        description="Rotary position embedding on interleaved pairs (Cohere, GPT-J) applied to x[B,H,S,D] with cos/sin[S,D].",
        signature="kernel_fn(x[B,H,S,D], cos[S,D], sin[S,D]) -> out[B,H,S,D]  # x*cos + rotate_pairs(x)*sin",
        reference=reference,
        adversarial_inputs=adversarial_inputs,
        **rotary_setting(),
    )
