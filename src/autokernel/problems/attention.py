"""attention: ``kernel_fn(q[B,H,S,D], k[B,Hkv,S,D], v[B,Hkv,S,Dv], causal=True, scale=None)``.

Dims (B, H, Hkv, S, D, causal), causal being 0/1, and optionally Dv, the value head dim (the
output's), where it differs from D: multi-head latent attention (DeepSeek-V2/V3) gives q and k
the rotary dims beside the others (nope 128 + rope 64 = 192) and v none of them (128).  A shape
without Dv has Dv = D (every problem recorded before Dv existed).  Grouped-query attention when
Hkv < H (H % Hkv == 0): query head h reads kv head h // (H // Hkv), as Hugging Face's ``repeat_kv``.
``scale`` None means 1/sqrt(D); even input draws pass, by turns (``scale_choices``), None,
1/sqrt(D) given explicitly (as Hugging Face passes it) and 1/D (muP-style multipliers, e.g.
Granite); odd draws a scale from [0.8/sqrt(D), 1.25/sqrt(D)] (``draw_scale``).  The causal mask keeps key j for query i when j <= i.

Reference: the math definition with the kv heads repeated, computed in at least fp32
(the harness passes fp64 copies on CPU), the output cast back to q's dtype.  Held-out and
edge shapes keep D, Dv, the ratio H/Hkv (and H, Hkv) and causal; held-out shapes move S and B.
A problem whose target shapes have a Dv of their own gets edge shapes with it too
(``value_dim_edges``); the others' judge shapes are what they were.
FLOPs: 2·B·H·S²·(D + Dv) (scores over D, their product with v over Dv), halved when causal.
Bytes: q and k (D wide), v and the output (Dv wide), each once.  DeepSeek-V3 as it runs
(B=1, H=Hkv=128, S=4096, D=192, Dv=128, causal, bf16): 2·128·4096²·(192 + 128) / 2 = 0.687
TFLOP and 2·128·4096·(2·192 + 2·128) = 671 MB (q and k 201 MB each, v and the output 134 MB
each): about 1020 FLOP a byte, compute-bound like every long causal attention.
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from .base import Problem, Shape, choose_or_draw, element_size, generator, randn

DIMS = ("B", "H", "Hkv", "S", "D", "causal")
OPTIONAL_DIMS = ("Dv",)  # after DIMS, only where the value head dim is not D


def value_dim(shape: Shape) -> int:
    return shape.get("Dv", shape["D"])


def _shape(b: int, h: int, hkv: int, s: int, d: int, causal: int) -> Shape:
    return dict(zip(DIMS, (b, h, hkv, s, d, causal)))


GPU_SHAPES = (
    _shape(2, 32, 32, 2048, 128, 1),
    _shape(1, 32, 32, 4096, 128, 1),
    _shape(2, 32, 32, 1024, 64, 1),
    _shape(2, 32, 8, 2048, 128, 1),   # GQA, LLaMA-3-8B heads
    _shape(2, 32, 32, 2048, 128, 0),  # bidirectional (encoder)
)
CPU_SHAPES = (
    _shape(1, 2, 2, 32, 16, 1),
    _shape(2, 4, 2, 40, 32, 1),
    _shape(1, 2, 1, 48, 64, 0),
)
GPU_EDGE_SHAPES = (_shape(1, 32, 8, 1, 128, 1), _shape(3, 32, 8, 1023, 128, 1), _shape(1, 8, 8, 777, 64, 0))
# 263 and 261 tokens: more than two key blocks of the widest BLOCK_N (a kernel that attends to a
# window of keys, or stops after a block or two, meets them; every other CPU shape fits in one)
CPU_EDGE_SHAPES = (_shape(1, 1, 1, 1, 16, 1), _shape(1, 3, 1, 17, 32, 1), _shape(2, 2, 2, 33, 64, 0),
                   _shape(1, 1, 1, 263, 16, 1), _shape(1, 1, 1, 261, 16, 0))
FIXED_DIMS = ("H", "Hkv", "D", "causal", "Dv")


def value_dim_edges(targets, device: str) -> tuple[Shape, ...]:
    """Edge shapes at each (D, Dv) of the targets whose Dv is its own (none for the others), with
    the target's heads: one query row, an odd length past two key blocks of the widest BLOCK_N
    (263 tokens on the CPU, 1023 on a GPU, as the other edges), and a bidirectional one."""
    pairs = {(t["D"], t["Dv"], t["H"], t["Hkv"]) for t in targets if "Dv" in t and t["Dv"] != t["D"]}
    long = 263 if device == "cpu" else 1023
    return tuple(dict(_shape(b, h, hkv, s, d, causal), Dv=dv)
                 for d, dv, h, hkv in sorted(pairs)
                 for b, s, causal in ((1, 1, 1), (1 if device == "cpu" else 3, long, 1), (1, 33, 0)))


def scaled_scores(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None):
    """The scaled scores q k^T and v, in at least fp32, the kv heads repeated for each group of
    query heads (the references' common part)."""
    work = torch.promote_types(q.dtype, torch.float32)
    q, k, v = q.to(work), k.to(work), v.to(work)
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return (q @ k.transpose(-2, -1)) * scale, v


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, scale: float | None = None):
    out_dtype = q.dtype
    scores, v = scaled_scores(q, k, v, scale)
    if causal:
        s = q.shape[-2]
        visible = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~visible, float("-inf"))
    return (scores.softmax(dim=-1) @ v).to(out_dtype)


def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, scale: float | None = None):
    """What a PyTorch model runs: scaled_dot_product_attention in the input dtype (flash/cuDNN
    backends on a GPU).  Timed as the eager baseline; the judge stays `reference`."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), scale=scale,
                                          enable_gqa=k.shape[1] != q.shape[1])


def scale_choices(d: int) -> tuple[float | None, ...]:
    return (None, d ** -0.5, 1.0 / d)


def draw_scale(d: int, seed: int) -> float | None:
    """``scale`` for the input draw ``seed``: even seeds walk through ``scale_choices``, odd seeds
    draw log-uniformly from [0.8/sqrt(D), 1.25/sqrt(D)].  Models pass scales near 1/sqrt(D) that
    are not it (Gemma-2-27B: 144^-0.5 at D = 128, 6% under): a kernel that snapped a scale within
    10% of 1/sqrt(D) to it passed while the draws held only the three choices."""
    return choose_or_draw(scale_choices(d), 0.8 * d ** -0.5, 1.25 * d ** -0.5, seed)


def logit_gain(d: int, scale: float | None) -> float:
    """What to multiply q by so that the scores under ``scale`` are as large as under 1/sqrt(D):
    the numerics cases pass the scale a regular draw passes (the model's op always passes one),
    and their large logits must stay large whichever it is."""
    return d ** -0.5 / (d ** -0.5 if scale is None else scale)


RISE = 100.0  # how far the scores of the rising-scores case climb above (and start below) 0


def rising_scores(q: torch.Tensor, k: torch.Tensor, scale: float | None,
                  gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k with one head dimension (drawn) set so that every query's scores rise along the
    keys, from about -RISE at the first key to +RISE at the last, whatever ``scale``: the best
    visible key comes late and far above the first ones (a recency bias).  A kernel that keeps
    the first key block's row max as its pivot, instead of a running max, overflows exp there;
    the large-logits case (about 20 N(0, 1) along the whole row) seldom puts the first block's
    best far enough below the row's (tests/attacks/attention_frozen_max.py passed).

    The rise is a cube of the key's position: slow over the first keys, steep at the end, so
    that the first block's best lies far below the row's (more than 100, exp's overflow) even when
    that block holds most of a short row, with scores no larger than RISE.  A straight rise needed
    scores of ±250 for the same gap, and an honest fp32 kernel's rounding of scores that large
    (half an ulp of 360 in exp2's units) came to the fp32 bound on one draw in a few thousand."""
    d, s = q.shape[-1], q.shape[-2]
    dim = int(torch.randint(0, d, (1,), generator=gen, device=q.device))
    q, k = q.clone(), k.clone()
    q[..., dim] = RISE * d ** 0.5 * logit_gain(d, scale)
    position = torch.linspace(0.0, 1.0, s, device=k.device, dtype=torch.float64)
    k[..., dim] = (2 * position ** 3 - 1).to(k.dtype)
    return q, k


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    b, h, hkv, s, d = (shape[n] for n in ("B", "H", "Hkv", "S", "D"))
    q = randn((b, h, s, d), dtype, device, gen)
    k = randn((b, hkv, s, d), dtype, device, gen)
    v = randn((b, hkv, s, value_dim(shape)), dtype, device, gen)
    return q, k, v, bool(shape["causal"]), draw_scale(d, seed)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    # every case passes ``scale`` as the regular draws do (drawn from the same choices): cases that
    # left it out told a kernel which calls judge its numerics (an argument count), and a kernel
    # that dropped the running max whenever ``scale`` was given passed
    # (tests/attacks/attention_pass9_scale_given_no_max.py)
    q, k, v, causal, scale = make_inputs(shape, dtype, device, seed)
    gen = generator(device, seed + 1)
    d = shape["D"]
    # rows of v at mixed scales 10^-3 .. 1.  (Large values test nothing here: the output is a
    # convex combination of v rows, and with v ~ 100 the bf16 rounding of the probabilities
    # that every flash kernel does exceeds the absolute tolerance near zero.)
    exps = torch.randint(-3, 1, (1, 1, v.shape[2], 1), generator=gen, device=device).float()
    projected = tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    return [
        # q, k, v as the model integration passes them (``head_strided_layout``): views of the
        # projections, heads inside tokens; and slices of one packed q|k|v projection, whose
        # token stride is that of the packed row
        ("projection-layout", (*projected, causal, scale)),
        ("packed-qkv-layout", (*packed_qkv(q, k, v), causal, scale)),
        # scores of ±(hundreds): a one-hot softmax, exp overflows without the running max
        ("large-logits", ((q.float() * (20 * logit_gain(d, scale))).to(dtype), k, v, causal, scale)),
        # scores near 0: uniform attention, the running sum must be exact
        ("tiny-logits", ((q.float() * 1e-3).to(dtype), k, v, causal, scale)),
        ("mixed-value-scales", (q, k, (v.float() * torch.pow(10.0, exps)).to(dtype), causal, scale)),
        ("explicit-scale", (q, k, v, causal, 2.0 / d ** 0.5)),
        ("rising-scores", (*rising_scores(q, k, scale, gen), v, causal, scale)),
    ]


def head_strided_layout(x: torch.Tensor) -> bool:
    """q/k/v as attention projections make them: view(B, S, H, D).transpose(1, 2) of a
    projection's output (or of a slice of a packed q|k|v output): any strides but a unit one
    for D.  Passed to attention kernels as they are, they spare three copies per call, and the
    output, given q's dense order (heads inside tokens), needs none before the output projection."""
    return x.dim() == 4 and not x.is_contiguous() and x.stride(-1) == 1


def packed_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The values of q, k, v as slices of one [B, S, (H + Hkv) * D + Hkv * Dv] tensor (GPT-2's
    c_attn; Dv, v's head dim, is D but in multi-head latent attention)."""
    b, h, s, d = q.shape
    hkv, dv = k.shape[1], v.shape[-1]
    packed = torch.empty((b, s, (h + hkv) * d + hkv * dv), dtype=q.dtype, device=q.device)
    views = []
    for t, start, heads in ((q, 0, h), (k, h * d, hkv), (v, (h + hkv) * d, hkv)):
        width = t.shape[-1]
        view = packed[:, :, start:start + heads * width].view(b, s, heads, width).transpose(1, 2)
        view.copy_(t)
        views.append(view)
    return tuple(views)


def heldout(shape: Shape, rng: random.Random) -> Shape:
    """Keep every dim but S and B (D, H, Hkv, and causal or the mask form); move S by up to
    ±20% (odd) and B by ±1."""
    out = dict(shape)
    s = shape["S"]
    if s > 1:
        s = max(2, int(round(s * rng.uniform(0.8, 1.2))))
        out["S"] = s + 1 if s % 2 == 0 else s
    out["B"] = max(1, shape["B"] + rng.choice((-1, 0, 1)))
    return out


def flops(shape: Shape) -> float:
    f = 2.0 * shape["B"] * shape["H"] * shape["S"] ** 2 * (shape["D"] + value_dim(shape))
    return f / 2 if shape["causal"] else f


def grouped_heads_error(shape: Shape) -> str | None:
    """A shape whose query heads the kv heads do not divide (grouped-query attention needs H % Hkv == 0)."""
    if shape["H"] % shape["Hkv"]:
        return f"H={shape['H']} is not a multiple of Hkv={shape['Hkv']} (each kv head serves H/Hkv query heads)"
    return None


def nbytes(shape: Shape, dtype: torch.dtype) -> float:
    b, h, hkv, s, d = (shape[n] for n in ("B", "H", "Hkv", "S", "D"))
    dv = value_dim(shape)
    return float((b * h * s * (d + dv) + b * hkv * s * (d + dv)) * element_size(dtype))


def make_problem() -> Problem:
    return Problem(
        kind="attention",
        description="scaled dot-product attention forward (causal or not, GQA, a value head dim of its own: MLA), flash-style",
        signature="kernel_fn(q[B,H,S,D], k[B,Hkv,S,D], v[B,Hkv,S,Dv], causal=True, scale=None) -> [B,H,S,Dv]",
        dims=DIMS,
        optional_dims=OPTIONAL_DIMS,
        target_edges=value_dim_edges,
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
