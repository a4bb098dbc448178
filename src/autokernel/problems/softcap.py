"""softcap: ``kernel_fn(x[M,N], cap) -> cap * tanh(x / cap)`` in x's dtype.

The soft cap Gemma-2 puts on its final logits (``final_logit_softcapping``, 30.0): transformers
writes it as three statements, ``x = x / cap; x = torch.tanh(x); x = x * cap``, three
element-wise kernels over the [tokens, vocabulary] logits.  Bytes: eager reads and writes the
logits three times, 6 MN e; fused 2 MN e (3x fewer, one launch instead of three).  At
Gemma-2's vocabulary (256,000) and 4x1024 tokens in bf16 that is 12.6 GB against 4.2 GB:
3.0 ms against 1.0 ms at 4.2 TB/s.

Inputs may hold ±inf (logits that overflowed in fp16): the output there is ±cap.

``cap`` walks through 30 and 50 (Gemma-2's final and attention caps) on even draws and is drawn
log-uniformly from [1, 100] on odd ones.  Regular inputs are logits of a few caps: N(0, 1)
times the cap, so the saturated tails and the near-linear middle both show.  Numerics cases:
``standard_adversarial``'s (values of ±10^4 caps, where tanh is ±1 and a ratio of exponentials
gives inf / inf; values 10^4 times under the cap, where the output is x itself to the
last bit a relative-precision tanh keeps; rows of mixed scales; one dominant value a row) and
±inf and zeros among regular values.
FLOPs: ~4 MN (a division, a multiplication, the tanh's exponential and division).
"""
from __future__ import annotations

import torch

from .base import (Problem, Shape, choose_or_draw, element_size, generator, randn, rowwise_shapes,
                   standard_adversarial)

CAPS = (30.0, 50.0)
CAP_RANGE = (1.0, 100.0)


def reference(x: torch.Tensor, cap: float) -> torch.Tensor:
    work = torch.promote_types(x.dtype, torch.float32)
    return (torch.tanh(x.to(work) / cap) * cap).to(x.dtype)


def eager(x: torch.Tensor, cap: float) -> torch.Tensor:
    """What transformers runs: three element-wise ops in x's dtype."""
    return torch.tanh(x / cap) * cap


def draw_cap(seed: int) -> float:
    return choose_or_draw(CAPS, *CAP_RANGE, seed)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    cap = draw_cap(seed)
    return randn((shape["M"], shape["N"]), dtype, device, generator(device, seed), scale=cap), cap


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    x, cap = make_inputs(shape, dtype, device, seed + 1)
    # large: 10^4 caps, where tanh is ±1 (clamped into fp16's range); tiny: values 10^4 times under
    # the cap, where a tanh that cancels (1 - 2 / (e^2t + 1)) loses fp32's relative precision
    gen = generator(device, seed + 7919)
    cases = standard_adversarial(x, gen, large=1e4, tiny=1e-4)
    if dtype == torch.float16:
        cases = [(name, t.float().clamp(-6e4, 6e4).to(dtype)) for name, t in cases]
    # ±inf (fp16 logits that overflowed) give ±cap, and exact zeros 0: a kernel whose sign or
    # tanh turns inf into NaN passed while no case held one
    special = x.clone()
    where = torch.rand(x.shape, generator=gen, device=device)
    special[where < 0.1] = float("inf")
    special[(where >= 0.1) & (where < 0.2)] = float("-inf")
    special[(where >= 0.2) & (where < 0.3)] = 0.0
    cases.append(("infinite-and-zero", special))
    return [(name, (t, cap)) for name, t in cases]


def flops(shape: Shape) -> float:
    return 4.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return 2.0 * shape["M"] * shape["N"] * element_size(dtype)


def make_problem() -> Problem:
    return Problem(
        kind="softcap",
        description="soft cap cap * tanh(x / cap) over logits (Gemma-2's final_logit_softcapping)",
        signature="kernel_fn(x[M,N], cap: float) -> out[M,N]  # cap * tanh(x / cap), in x's dtype",
        dims=("M", "N"),
        reference=reference,
        eager=eager,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        # Gemma-2's logits at 2048 and 1024 tokens (4096 rows of 256,000 are 4 GB a tensor in fp32:
        # the judge's sets of them, 152 GiB, outgrow its memory plan on an H200), and a 32k vocabulary
        gpu_shapes=({"M": 2048, "N": 256000}, {"M": 1024, "N": 256000}, {"M": 4096, "N": 32000}),
        **rowwise_shapes(),
        adversarial_inputs=adversarial_inputs,
    )
