"""rotary_table: the cos / sin tables of rotary position embeddings, computed from the position
ids each forward (the ``*RotaryEmbedding`` modules of Hugging Face decoders: LLaMA, Phi-3,
Gemma, Mistral...), default RoPE.

    freqs = position_ids[..., None].float() * inv_freq           (fp32, as the models compute it)
    emb = cat(freqs, freqs)                                      [B, S, D]
    cos, sin = cos(emb) * scaling, sin(emb) * scaling            (fp32), then cast to like.dtype

``like`` is a tensor whose dtype the tables take (the models pass the hidden states);
``inv_freq`` [D/2] is fp32 in every dtype (the models keep it so); ``scaling`` (the
"attention scaling" of scaled RoPE variants, 1 for default RoPE) and the RoPE base behind
inv_freq are drawn per input draw (``draw_scalars``): by turns a value models use and one from
a continuous range, so a kernel that fixes either, or reads it as a flag of a small set, fails.
Positions reach 2**24 in one numerics case (1M-token contexts and beyond): the cos/sin of the
fp32 angle needs a full range reduction there.

Bytes: read the ids (8 BS) and inv_freq, write both tables: 2 BSD e + 8 BS.  Eager runs
about ten kernels (float, mul or matmul, cat, cos, sin, two muls, two casts), each writing a
fp32 [B,S,D] or [B,S,D/2] tensor and most reading one: about 40 BSD bytes and 10 launches,
against 2 BSD e and 1 launch fused (4 BSD in bf16: ~10x fewer bytes).
"""
from __future__ import annotations

import math
import random

import torch

from .base import Problem, Shape, choose, element_size, generator, log_uniform, randn

# what models use: RoPE bases (LLaMA 2, LLaMA 3, CodeLlama / Qwen long-context) and attention
# scalings (default RoPE; YaRN's 0.1 ln(factor) + 1 for factors 4 and 32)
BASE_CHOICES = (10000.0, 500000.0, 1000000.0)
SCALING_CHOICES = (1.0, 0.1 * math.log(4.0) + 1.0, 0.1 * math.log(32.0) + 1.0)
# the continuous ranges drawn between them
BASE_RANGE = (1e3, 1e7)  # log-uniform
SCALING_RANGE = (0.5, 1.5)
LONG_POSITIONS = (2 ** 20, 2 ** 24)  # positions stay exact in fp32 up to 2**24


def draw_scalars(seed: int) -> tuple[float, float]:
    """(base, scaling) for the input draw ``seed``: even seeds take the scaling, odd seeds the
    base, from what models use (walking through ``*_CHOICES``), the other one from its
    continuous range; so any two consecutive draws see a continuous value of each."""
    rng = random.Random(int(seed) * 7919 + 17)
    base = log_uniform(rng, *BASE_RANGE)
    scaling = rng.uniform(*SCALING_RANGE)
    if seed % 2:
        base = choose(BASE_CHOICES, seed // 2)
    else:
        scaling = choose(SCALING_CHOICES, seed // 2)
    return base, scaling


def reference(position_ids: torch.Tensor, inv_freq: torch.Tensor, scaling: float, like: torch.Tensor):
    freqs = position_ids[..., None].float() * inv_freq.float()  # fp32 product, as the models
    emb = torch.cat((freqs, freqs), dim=-1)
    # cos / sin of that fp32 angle in the best precision at hand (fp64 on the harness's upcast copies)
    work = emb.to(torch.promote_types(emb.dtype, like.dtype))
    return (work.cos() * scaling).to(like.dtype), (work.sin() * scaling).to(like.dtype)


def inverse_frequencies(d: int, base: float, device: str) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))


def make_positions(b: int, s: int, device: str, gen: torch.Generator, max_offset: int = 2048,
                   min_offset: int = 0) -> torch.Tensor:
    """Rows of consecutive positions, each starting at its own offset (a batch of decodes)."""
    offsets = torch.randint(min_offset, max(min_offset + 1, max_offset), (b, 1), generator=gen, device=device)
    return offsets + torch.arange(s, device=device)[None, :]


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    positions = make_positions(shape["B"], shape["S"], device, gen)
    base, scaling = draw_scalars(seed)
    inv_freq = inverse_frequencies(shape["D"], base, device)
    like = randn((1,), dtype, device, gen)
    return (positions, inv_freq, scaling, like)


def flops(shape: Shape) -> float:
    return 6.0 * shape["B"] * shape["S"] * shape["D"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return float(2 * shape["B"] * shape["S"] * shape["D"] * element_size(dtype) + 8 * shape["B"] * shape["S"]
                 + 2 * shape["D"])


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    positions, inv_freq, scaling, like = make_inputs(shape, dtype, device, seed + 1)
    gen = generator(device, seed + 7919)
    b, s = shape["B"], shape["S"]
    return [
        # long contexts: angles of 1e5 radians need the fp32 product and a full range reduction
        ("long-context", (make_positions(b, s, device, gen, max_offset=131072), inv_freq, scaling, like)),
        # 1M-token contexts and beyond (fp32 positions are exact up to 2**24): a range reduction
        # that is exact only for smaller angles (Cody-Waite with a short 2*pi) is wrong here
        ("very-long-context", (make_positions(b, s, device, gen, max_offset=LONG_POSITIONS[1] - s,
                                              min_offset=LONG_POSITIONS[0]), inv_freq, scaling, like)),
        # packed sequences: positions restart inside a row; any order, repeats
        ("shuffled", (torch.randint(0, 4096, (b, s), generator=gen, device=device), inv_freq, scaling, like)),
        ("zero-positions", (torch.zeros_like(positions), inv_freq, scaling, like)),
    ]


def make_problem() -> Problem:
    return Problem(
        kind="rotary_table",
        description="RoPE cos/sin tables from position ids: cos/sin(cat(pos*inv_freq, pos*inv_freq)) * scaling, cast.",
        signature="kernel_fn(position_ids[B,S] int64, inv_freq[D/2] fp32, scaling: float, like: Tensor) -> "
                  "(cos[B,S,D], sin[B,S,D])  # in like.dtype; angle pos.float()*inv_freq in fp32; scaling varies "
                  "(any float); positions up to 2**24",
        dims=("B", "S", "D"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        gpu_shapes=({"B": 1, "S": 4096, "D": 128}, {"B": 4, "S": 1024, "D": 128}, {"B": 8, "S": 2048, "D": 64}),
        cpu_shapes=({"B": 2, "S": 32, "D": 64}, {"B": 1, "S": 37, "D": 96}),
        gpu_edge_shapes=({"B": 1, "S": 1, "D": 2}, {"B": 3, "S": 7, "D": 128}, {"B": 1, "S": 1001, "D": 80},
                         {"B": 2, "S": 3, "D": 512}),
        cpu_edge_shapes=({"B": 1, "S": 1, "D": 2}, {"B": 3, "S": 7, "D": 32}, {"B": 1, "S": 5, "D": 160}),
        fixed_dims=("D",),
        dtypes=(torch.bfloat16, torch.float16, torch.float32),
        adversarial_inputs=adversarial_inputs,
    )
