"""What the residual add + norm kinds (``add_rmsnorm``, ``add_layernorm``) share.

A pre-norm transformer block ends ``h = residual + sublayer(x)`` and the next block starts
``norm(h)``; both the sum (the next residual) and the normalised rows are used.  Fused, one
pass reads the two addends and writes both outputs.

Bytes per forward (M rows of N elements, e bytes each; the weight is negligible):

    separate:  add reads 2MN, writes MN;  norm reads MN, writes MN   -> 5 MN e, 2 launches
    fused:     reads 2MN, writes 2MN (sum and normalised)            -> 4 MN e, 1 launch

so the fusion saves MN e (20%) and one launch per norm, and a kernel that is at the memory
roofline is 1.25x the separate pair at best.
"""
from __future__ import annotations

import torch

from .base import Shape, generator, standard_adversarial, with_nonfinite


def split_sum(s: torch.Tensor, device: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two addends whose sum is (close to) ``s``: x a random share of each element, residual the
    rest, both in ``s``'s dtype.  Both are proportional to ``s`` row by row, so the plain norm's
    drawn rows (rows near eps, a non-zero mean) survive the split."""
    gen = generator(device, seed + 104729)
    share = torch.rand(s.shape, generator=gen, device=device, dtype=torch.float32) * 1.5 - 0.25
    x = (s.float() * share).to(s.dtype)
    return x, (s.float() - x.float()).to(s.dtype)


def exact_split(s: torch.Tensor, step: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two addends of ``s`` (non-negative, every value a multiple of ``step``) that sum to it
    exactly in its dtype: x a random share of each element rounded to the step, residual the
    rest, both between 0 and ``s``.  A row built to stress the norm (``layernorm.large_mean_rows``)
    reaches it unchanged, not rounded again by the split."""
    share = torch.rand(s.shape, generator=gen, device=s.device, dtype=torch.float32)
    x = torch.round(s.float() * share / step) * step
    return x.to(s.dtype), (s.float() - x).to(s.dtype)


def add_in_dtype(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The sum as the model computes it: in the inputs' dtype."""
    return x + residual


def bytes_moved(shape: Shape, dtype: torch.dtype, n_params: int) -> float:
    e = torch.empty((), dtype=dtype).element_size()
    return float((4 * shape["M"] * shape["N"] + n_params * shape["N"]) * e)


def adversarial_addends(x: torch.Tensor, residual: torch.Tensor, dtype: torch.dtype, gen: torch.Generator) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Cases on the first addend (large, tiny, mixed, dominant), plus two addends that nearly
    cancel, so that a kernel normalising x alone (or the sum rounded wrongly) fails."""
    # half of the largest value a norm input may take in the dtype: the sum must still fit
    large = 2.5e3 if dtype == torch.float16 else 5e5
    cases = [(name, t, residual) for name, t in standard_adversarial(x, gen, large=large)]
    cases.append(("cancelling", (-residual.float() + 1e-2 * x.float()).to(dtype), residual))
    cases.append(("nan", with_nonfinite(x, gen), residual))  # the sum's row and its norm are NaN
    return cases
