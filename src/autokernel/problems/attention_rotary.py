"""attention_rotary: ``kernel_fn(q[B,H,S,D], k[B,Hkv,S,D], v[B,Hkv,S,D], cos[S,D], sin[S,D],
causal=True, scale=None)``.

    out = attention(rotary(q), rotary(k), v)

``rotary`` is the ``rotary`` kind's rotation (the ``rotate_half`` layout of Hugging Face
models: ``x * cos + rotate_half(x) * sin``, ``rotate_half(x) = cat(-x[..., D/2:],
x[..., :D/2])``, cos/sin ``[S, D]`` in q's dtype, broadcast over batch and heads), applied to q
and k; ``attention`` is the ``attention`` kind's (causal or not, GQA: query head h reads kv
head h // (H // Hkv); ``scale`` None means 1/sqrt(D); even inputs pass by turns None, 1/sqrt(D)
and 1/D, odd ones a scale from [0.8, 1.25]/sqrt(D), ``attention.draw_scale``).  A kind of its
own so that ``attention`` and ``rotary`` and their workspaces stay as they are.  Dims (B, H, Hkv, S, D, causal).

Inputs: cos/sin are a real RoPE table, ``cat(f, f)`` with ``f = pos * theta^(-2i/D)``, but
with theta drawn per input (10^3.5 .. 10^6.5) and the positions starting at a drawn offset, so
a kernel cannot compute the table itself from its indices; one numerics case draws the two
halves of cos/sin independently (as the ``rotary`` kind does), so a kernel must read both.

Reference: the rotation, then the attention math, in at least fp32 (the harness passes fp64
copies on CPU), the output cast to q's dtype.  Held-out and edge shapes keep D, H, Hkv and
causal; held-out shapes move S and B (as ``attention``).  FLOPs: the attention's 4·B·H·S²·D,
halved when causal (the rotation's 6·S·D per head is noise next to it).

Bytes, at the LLaMA example's shape (dim 4096, 32 heads of 128, 4x1024 tokens, bf16, causal;
e = 2 bytes, N = B·S·D = 0.5 M elements per head): the unfused pair reads q and k, writes the
rotated q and k (``rotary``), then attention reads them again with v and writes o, so q and k
cross memory three times, v and o once, plus the 2·S·D cos/sin table:

* MHA (Hkv = 32): q = k = v = o = 33.6 MB.  Unfused 3·(q + k) + v + o = 268.4 MB (+0.5 MB
  table), fused q + k + v + o = 134.2 MB: the fusion saves 2·(q + k) = 134.2 MB, 32.0 us at
  4.2 TB/s.  The attention's flop floor is 34.4 GFLOP / 730 TFLOP/s = 47.1 us (its bytes, 32
  us, hide under it); the rotary's byte floor is 32.1 us.  Pair floor 79.1 us, fused floor
  47.1 us: the fusion can save at most 40% of the pair.
* GQA as the example runs it (Hkv = 8): k = v = 8.4 MB.  Saved 2·(q + k) = 83.9 MB = 20.0 us;
  pair floor 47.1 + 20.1 = 67.2 us, fused 47.1 us: at most 30%.

What it costs: the fused kernel rotates each K tile once per query block that reads it (and
with GQA once per query head of the group), in fp32 on the CUDA cores, ~6·BLOCK_N·D flops
against the tile's 4·BLOCK_M·BLOCK_N·D tensor-core flops, and it reads the cos/sin tile of
the keys each time (from L2: the table is 0.5 MB).  Whether the fusion pays on a GPU is
``benchmarks/attention_rotary_gpu.py``'s question.
"""
from __future__ import annotations

import math
import random

import torch

from .attention import (draw_scale, flops, grouped_heads_error, head_strided_layout, heldout, logit_gain, packed_qkv,
                        rising_scores)
from .attention import reference as attention_reference
from .rotary import reference as rotate  # the rotary kind's rotation, x * cos + rotate_half(x) * sin
from .base import Problem, Shape, element_size, generator, randn

DIMS = ("B", "H", "Hkv", "S", "D", "causal")


def _shape(b: int, h: int, hkv: int, s: int, d: int, causal: int) -> Shape:
    return dict(zip(DIMS, (b, h, hkv, s, d, causal)))


GPU_SHAPES = (
    _shape(4, 32, 8, 1024, 128, 1),   # the LLaMA example at dim 4096 (8 kv heads), 4x1024 tokens
    _shape(4, 32, 32, 1024, 128, 1),  # the same with every head its own kv head (LLaMA-2-7B)
)
CPU_SHAPES = (  # tiny: the interpreter runs every (batch, head) program in Python
    _shape(1, 2, 2, 32, 16, 1),
    _shape(1, 4, 2, 24, 32, 1),
    _shape(1, 2, 1, 33, 64, 0),
)
GPU_EDGE_SHAPES = (_shape(1, 32, 8, 1, 128, 1), _shape(3, 32, 8, 1023, 128, 1), _shape(1, 8, 8, 777, 64, 0))
# 263 and 261 tokens: past two key blocks of the widest BLOCK_N (attention's)
CPU_EDGE_SHAPES = (_shape(1, 1, 1, 1, 16, 1), _shape(1, 3, 1, 17, 32, 1), _shape(1, 2, 2, 19, 16, 0),
                   _shape(1, 1, 1, 263, 16, 1), _shape(1, 1, 1, 261, 16, 0))
FIXED_DIMS = ("H", "Hkv", "D", "causal")


def reference(q, k, v, cos, sin, causal: bool = True, scale: float | None = None):
    return attention_reference(rotate(q, cos, sin), rotate(k, cos, sin), v, causal, scale)


def eager(q, k, v, cos, sin, causal: bool = True, scale: float | None = None):
    """What a model runs: the rotation as models write it, then scaled_dot_product_attention in
    the input dtype.  Timed as the eager baseline; the judge stays ``reference``."""
    from .attention import eager as attention_eager

    return attention_eager(rotate(q, cos, sin), rotate(k, cos, sin), v, causal, scale)


def rope_table(positions: torch.Tensor, d: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [S, D] of a rotate_half RoPE table at ``positions``: the angles
    ``pos * theta^(-2i/D)`` computed in fp32, as models compute them, each half the same."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=positions.device) / d))
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    b, h, hkv, s, d = (shape[n] for n in ("B", "H", "Hkv", "S", "D"))
    q = randn((b, h, s, d), dtype, device, gen)
    k = randn((b, hkv, s, d), dtype, device, gen)
    v = randn((b, hkv, s, d), dtype, device, gen)
    table = random.Random(seed)  # the table's draw: no tensor value read back to the host
    theta = 10.0 ** table.uniform(3.5, 6.5)
    offset = table.randrange(4096)
    cos, sin = rope_table(torch.arange(offset, offset + s, device=device), d, theta, dtype)
    return q, k, v, cos, sin, bool(shape["causal"]), draw_scale(d, seed)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    q, k, v, cos, sin, causal, scale = make_inputs(shape, dtype, device, seed)  # every case passes scale (attention.py)
    gen = generator(device, seed + 1)
    s, d = shape["S"], shape["D"]
    # cos/sin halves drawn independently: a kernel reading one half for both fails
    angle = (torch.rand((2, s, d), generator=gen, device=device) * 2 - 1) * math.pi
    free_cos, free_sin = torch.cos(angle[0]).to(dtype), torch.sin(angle[1]).to(dtype)
    projected = tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    return [
        ("independent-halves", (q, k, v, free_cos, free_sin, causal, scale)),
        # q, k, v as the model integration passes them: views of the projections (heads inside
        # tokens), and slices of one packed q|k|v projection
        ("projection-layout", (*projected, cos, sin, causal, scale)),
        ("packed-qkv-layout", (*packed_qkv(q, k, v), cos, sin, causal, scale)),
        # one-hot softmax after the rotation: the running max must hold.  Quarter-turn angles
        # (cos, sin in {0, ±1}) make the rotation exact in every dtype: with a general table the
        # rounding of the rotated q (which eager and every kernel feeding tl.dot in bf16 do),
        # times logits of ±20, exceeds any tolerance
        ("large-logits", ((q.float() * (20 * logit_gain(d, scale))).to(dtype), k, v,
                          *quarter_turns(s, d, dtype, device, gen), causal, scale)),
        ("tiny-logits", ((q.float() * 1e-3).to(dtype), k, v, cos, sin, causal, scale)),
        # twice the usual scale doubles the logits, and with them the error of the one rounding
        # of the rotated q and k that every kernel feeding tl.dot in bf16 makes: 0.5-0.6 of the
        # tolerance at 1024 tokens before the kernel's own error (failed the starter on a GPU).
        # The scale argument is what this case judges; exact quarter turns keep the rotation out
        ("explicit-scale", (q, k, v, *quarter_turns(s, d, dtype, device, gen), causal, 2.0 / d ** 0.5)),
        ("rising-scores", rising_after_rotation(q, k, v, causal, scale, gen)),
    ]


def rising_after_rotation(q, k, v, causal, scale, gen) -> tuple:
    """The attention kind's rising-scores case for the rotated q and k: the scores rise along the
    keys after the rotation, so q and k are the ramped ones turned back by a quarter-turn table
    (exact in every dtype, as the rotation the kernel makes)."""
    s, d = q.shape[-2], q.shape[-1]
    cos, sin = quarter_turns(s, d, q.dtype, q.device.type, gen)
    q_rot, k_rot = rising_scores(q, k, scale, gen)
    return (rotate(q_rot, cos, -sin), rotate(k_rot, cos, -sin), v, cos, sin, causal, scale)


def quarter_turns(s: int, d: int, dtype: torch.dtype, device: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [S, D] of angles that are multiples of pi/2 (halves alike, as a RoPE table's)."""
    turns = torch.randint(0, 4, (s, d // 2), generator=gen, device=device)
    turns = torch.cat((turns, turns), dim=-1)
    cos = torch.tensor([1.0, 0.0, -1.0, 0.0], device=device)[turns]
    sin = torch.tensor([0.0, 1.0, 0.0, -1.0], device=device)[turns]
    return cos.to(dtype), sin.to(dtype)


def nbytes(shape: Shape, dtype: torch.dtype) -> float:
    """The fused kernel's fewest bytes: q, k, v and the cos/sin table read once, o written once."""
    b, h, hkv, s, d = (shape[n] for n in ("B", "H", "Hkv", "S", "D"))
    return float((2 * b * h * s * d + 2 * b * hkv * s * d + 2 * s * d) * element_size(dtype))


def unfused_bytes(shape: Shape, dtype: torch.dtype) -> float:
    """Bytes of the separate rotary + attention pair: q and k also written rotated and read
    again (2·(q + k) more than ``nbytes``)."""
    b, h, hkv, s, d = (shape[n] for n in ("B", "H", "Hkv", "S", "D"))
    return nbytes(shape, dtype) + 2.0 * (b * h * s * d + b * hkv * s * d) * element_size(dtype)


def make_problem() -> Problem:
    return Problem(
        kind="attention_rotary",
        description="rotary position embedding (rotate_half) on q and k, then attention (causal or not, GQA)",
        signature=("kernel_fn(q[B,H,S,D], k[B,Hkv,S,D], v[B,Hkv,S,D], cos[S,D], sin[S,D], causal=True, "
                   "scale=None) -> [B,H,S,D]  # attention(rotary(q), rotary(k), v)"),
        dims=DIMS,
        reference=reference,
        eager=eager,
        make_inputs=make_inputs,
        flops=flops,
        bytes=nbytes,
        gpu_shapes=GPU_SHAPES,
        cpu_shapes=CPU_SHAPES,
        gpu_edge_shapes=GPU_EDGE_SHAPES,
        cpu_edge_shapes=CPU_EDGE_SHAPES,
        fixed_dims=FIXED_DIMS,
        check_shape=grouped_heads_error,
        adversarial_inputs=adversarial_inputs,
        heldout=heldout,
        passthrough_layout=head_strided_layout,
    )
