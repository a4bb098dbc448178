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

from .base import Problem, Shape, generator, standard_adversarial
from .rotary import _power_of_two_table, make_inputs, rotary_setting


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_pairs(x) * sin


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed + 7919)
    x, _, _ = make_inputs(shape, dtype, device, seed + 1)
    cos = _power_of_two_table(shape, dtype, device, gen)
    sin = _power_of_two_table(shape, dtype, device, gen)
    large = 5e3 if dtype == torch.float16 else 1e6  # |out| <= |x1| + |x2|: 2 * 6 * large inside fp16
    cases = [(name, (t, cos, sin)) for name, t in standard_adversarial(x, gen, large=large)]
    # the half-split layout's partner of each element differs from the pair's: a kernel that
    # rotates halves fails every case; this one has x's odd elements zero, so that a kernel must
    # also place the rotated even elements right
    evens_only = x.clone()
    evens_only[..., 1::2] = 0
    heads_inner = x.transpose(1, 2).contiguous().transpose(1, 2)
    return cases + [("odd-elements-zero", (evens_only, cos, sin)), ("projection-layout", (heads_inner, cos, sin))]


def make_problem() -> Problem:
    return Problem(
        kind="rotary_interleaved",
        description="Rotary position embedding on interleaved pairs (Cohere, GPT-J) applied to x[B,H,S,D] with cos/sin[S,D].",
        signature="kernel_fn(x[B,H,S,D], cos[S,D], sin[S,D]) -> out[B,H,S,D]  # x*cos + rotate_pairs(x)*sin",
        reference=reference,
        adversarial_inputs=adversarial_inputs,
        **rotary_setting(),
    )
