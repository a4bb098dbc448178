"""rotary_pairs_to_halves: rotary position embedding that reads interleaved pairs and writes
halves (DeepSeek-V2/V3's ``apply_rotary_pos_emb_interleave``).

    x1, x2 = x[..., 0::2], x[..., 1::2]          (pair i: x[2i], x[2i+1])
    c, s = cos[..., :D/2], sin[..., :D/2]        (the tables' first half: one angle per pair)
    out = cat(x1 * c - x2 * s, x2 * c + x1 * s)  (the rotated pairs' first elements, then their seconds)

x is [B, H, S, D] (D even); cos and sin are [S, D] in x's dtype, as the rotary modules make them
(``cat(freqs, freqs)``): only their first half is read, as the model's function reads it.  The
halves that come out are the ``rotate_half`` layout's, so the rotated dims meet keys rotated the
same way (DeepSeek stores its rope weights interleaved).  Neither ``rotary`` (halves in and out)
nor ``rotary_interleaved`` (pairs in and out) computes this; each fails its cases.
Bytes: x read and the output written once, and the tables' first halves.
"""
from __future__ import annotations

import torch

from .base import Problem, Shape, element_size
from .rotary import adversarial_inputs as rotary_cases
from .rotary import make_inputs, rotary_setting


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    n_x = shape["B"] * shape["H"] * shape["S"] * shape["D"]
    return float((2 * n_x + shape["S"] * shape["D"]) * element_size(dtype))


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    """``rotary``'s cases (exact power-of-two tables, magnitudes, the projection layout), and x with
    its odd elements zero: each output half then holds the even elements alone, rotated, so a
    kernel that gathers another element of each pair (or writes pairs back) fails."""
    cases = rotary_cases(shape, dtype, device, seed)
    _, cos, sin = cases[0][1]
    evens_only, _, _ = make_inputs(shape, dtype, device, seed + 1)
    evens_only[..., 1::2] = 0
    return cases + [("odd-elements-zero", (evens_only, cos, sin))]


def make_problem() -> Problem:
    return Problem(
        kind="rotary_pairs_to_halves",
        description="Rotary position embedding reading interleaved pairs and writing rotate_half halves "
                    "(DeepSeek-V3's apply_rotary_pos_emb_interleave) on x[B,H,S,D] with cos/sin[S,D] "
                    "(their first half read).",
        signature="kernel_fn(x[B,H,S,D], cos[S,D], sin[S,D]) -> out[B,H,S,D]  "
                  "# cat(x1*c - x2*s, x2*c + x1*s), x1, x2 = x[..., 0::2], x[..., 1::2], c, s = cos, sin[..., :D/2]",
        reference=reference,
        adversarial_inputs=adversarial_inputs,
        **dict(rotary_setting(), bytes=bytes_moved),
    )
