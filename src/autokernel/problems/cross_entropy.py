"""cross_entropy: mean cross-entropy loss of logits[M, V] against integer targets[M].

Same as ``F.cross_entropy(logits, targets, ignore_index=ignore_index)``: rows whose target is
``ignore_index`` are left out of the mean; the result is a 0-d tensor in the logits' dtype.
``ignore_index`` is drawn per input draw: every other draw from what training code uses
(``IGNORE_CHOICES``: -100, Hugging Face's default; -1; 0, a padding id), the others a class id in
[1, V) (a pad token's id), with some targets equal to it: a kernel that fixes -100, or reads the
argument as a choice of a few values, fails.
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from .base import Problem, Shape, Tolerance, choose, element_size, generator, randn, standard_adversarial, rowwise_shapes, with_nonfinite

IGNORE_INDEX = -100
IGNORE_CHOICES = (-100, -1, 0)


def reference(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    return F.cross_entropy(logits, targets, ignore_index=int(ignore_index))


def ignore_index_for(v: int, seed: int) -> int:
    """The draw's ignore_index: even seeds walk through ``IGNORE_CHOICES``, odd seeds draw a
    class id in [1, V) (a pad token's id, as some training code passes it), so a kernel cannot
    read the argument as a flag of a small set (one that took every positive ignore_index for
    -100 passed while every draw was -100, -1 or 0); a one-class vocabulary cannot ignore its
    only class."""
    if int(seed) % 2 == 1 and v > 1:
        return random.Random(int(seed) * 7919 + 17).randrange(1, v)
    chosen = choose(IGNORE_CHOICES, int(seed) // 2)
    return IGNORE_INDEX if v == 1 and chosen == 0 else chosen


def make_targets(m: int, v: int, device: str, gen: torch.Generator, ignore_index: int = IGNORE_INDEX,
                 ignored_fraction: float = 0.05) -> torch.Tensor:
    targets = torch.randint(0, v, (m,), generator=gen, device=device)
    ignored = torch.rand((m,), generator=gen, device=device) < ignored_fraction
    ignored[0] = False  # at least one row counts, so the mean is defined
    if int(targets[0]) == ignore_index:
        targets[0] = (ignore_index + 1) % v
    return targets.masked_fill(ignored, ignore_index)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    logits = randn((shape["M"], shape["V"]), dtype, device, gen, scale=2.0)
    ignore_index = ignore_index_for(shape["V"], seed)
    return (logits, make_targets(shape["M"], shape["V"], device, gen, ignore_index), ignore_index)


def flops(shape: Shape) -> float:
    # max, subtract, exp, sum per logit
    return 4.0 * shape["M"] * shape["V"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    size = element_size(dtype)
    return float(shape["M"] * shape["V"] * size + shape["M"] * 8 + size)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed + 7919)
    logits, targets, ignore_index = make_inputs(shape, dtype, device, seed + 1)
    # A row's loss is about max(logits) - logits[target] (up to ~12 * large).  CPU eager adds
    # the row losses in the dtype itself, so keep a few dozen of them inside fp16 / bf16 steps.
    large = 1e2 if dtype == torch.float16 else 1e3
    cases = [(name, (t, targets, ignore_index)) for name, t in standard_adversarial(logits, gen, large=large)]
    m = shape["M"]
    # The dominant logit of each row is its target: every loss is ~0.
    hit = logits.clone()
    hit[torch.arange(m, device=device), targets.clamp(min=0)] = large
    cases.append(("dominant-target", (hit, targets, ignore_index)))
    # Nearly all rows ignored: the mean divides by a small count.
    mostly = torch.full_like(targets, ignore_index)
    keep = torch.randint(0, m, (2,), generator=gen, device=device)
    kept = torch.randint(0, shape["V"], (2,), generator=gen, device=device)
    if shape["V"] > 1:
        kept = torch.where(kept == ignore_index, (kept + 1) % shape["V"], kept)
    mostly[keep] = kept
    cases.append(("mostly-ignored", (logits, mostly, ignore_index)))
    # a NaN logit in one row that counts (an ignored row never enters the reference's mean)
    counted = (targets != ignore_index).nonzero().flatten()[:1]
    if counted.numel():
        cases.append(("nan", (with_nonfinite(logits, gen, rows=counted), targets, ignore_index)))
    cases.append(("masked-inf", (masked_vocabulary(logits, targets, ignore_index, gen), targets, ignore_index)))
    return cases


def masked_vocabulary(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int,
                      gen: torch.Generator) -> torch.Tensor:
    """``logits`` with about half of them -inf (a vocabulary masked for constrained decoding, or
    padded past the real one), never a counted row's target nor any row's first logit: every loss
    stays finite.  A kernel whose running maxima start at -inf forms exp(-inf - -inf) = NaN on
    them (tests/attacks/cross_entropy_lane_max_from_minus_inf.py passed without this case)."""
    drop = torch.rand(logits.shape, generator=gen, device=logits.device) < 0.5
    drop[:, 0] = False
    counted = (targets != ignore_index).nonzero().flatten()
    drop[counted, targets[counted]] = False
    return logits.masked_fill(drop, float("-inf"))


def make_problem() -> Problem:
    return Problem(
        kind="cross_entropy",
        description="Mean cross-entropy loss over rows of logits, rows with target == ignore_index left out (F.cross_entropy).",
        signature="kernel_fn(logits[M,V], targets[M] int64, ignore_index=-100) -> loss[]  # F.cross_entropy(..., ignore_index=ignore_index), logits dtype; ignore_index varies (-100, -1, 0, or a class id in [1, V))",
        dims=("M", "V"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=({"M": 4096, "V": 32000}, {"M": 8192, "V": 50257}, {"M": 4096, "V": 128256}),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        tolerances={
            torch.float32: Tolerance(atol=1e-4, rtol=1e-4, max_rel_norm=1e-4),
            torch.float16: Tolerance(atol=2e-3, rtol=4e-3, max_rel_norm=4e-3),
            # one scalar: the elementwise and norm bounds coincide; eager rounds each
            # log-probability to bf16 before averaging
            torch.bfloat16: Tolerance(atol=1.6e-2, rtol=2e-2, max_rel_norm=2e-2),
        },
        **rowwise_shapes("V"),
        adversarial_inputs=adversarial_inputs,
    )
