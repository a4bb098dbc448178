"""attention_masked: ``kernel_fn(q[B,H,S,D], k[B,Hkv,S,D], v[B,Hkv,S,D], mask, scale=None)``.

Attention with an explicit mask, as ``scaled_dot_product_attention(q, k, v, attn_mask=mask)``
computes it: what Hugging Face models call when a batch is padded, and what they call while a
CUDA stream captures (they cannot read the padding mask's values then, so they build the full
mask).  A separate kind from ``attention`` so that ``attention``'s ``kernel_fn`` and every
kernel file written for it stay valid.

Dims (B, H, Hkv, S, D, additive, per_query), the last two 0/1:

* ``mask`` is 4-D ``[Bm, Hm, Sm, S]``, each of Bm, Hm, Sm either 1 (broadcast) or B, H, S.
  ``per_query`` 1: Sm = S (a mask per query row, ``[B,1,S,S]`` as transformers builds it);
  0: Sm = 1 (a key-padding mask, ``[B,1,1,S]``).  The numerics stage also passes a mask shared
  by the batch (Bm = 1) and one per head (Hm = H): kernels read the mask through its strides,
  a size-1 dimension broadcast.
* ``additive`` 0: a bool mask, True where the key is attended (SDPA's convention).
  1: a float mask in q's dtype or fp32 (every fourth draw, built in fp32), added to the scaled scores
  (transformers' older "4d attention mask" with ``finfo.min`` at masked keys, ALiBi-like
  biases, ``-inf``).
* A query row whose every key is masked (every entry False, or ``-inf``) gives zeros, as SDPA
  gives; a row of ``finfo.min`` entries is not masked out but uniform (the scores vanish
  next to finfo.min), also as SDPA gives.

Grouped-query attention when Hkv < H, as in ``attention``; ``scale`` None means 1/sqrt(D), and
even inputs pass by turns None, 1/sqrt(D) and 1/D, odd ones a scale from [0.8, 1.25]/sqrt(D)
(``attention.draw_scale``).  Reference: the math definition in at least fp32
(the harness passes fp64 copies on CPU).  Held-out and edge shapes keep D, H, Hkv and the mask
form; held-out shapes move S and B.  FLOPs: 4·B·H·S²·D; bytes add the mask once.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F

from .attention import (draw_scale, grouped_heads_error, head_strided_layout, heldout, logit_gain, packed_qkv,
                        rising_scores, scaled_scores)
from .base import Problem, Shape, choose, element_size, generator, randn

DIMS = ("B", "H", "Hkv", "S", "D", "additive", "per_query")


def _shape(b: int, h: int, hkv: int, s: int, d: int, additive: int, per_query: int) -> Shape:
    return dict(zip(DIMS, (b, h, hkv, s, d, additive, per_query)))


GPU_SHAPES = (
    _shape(4, 12, 12, 512, 64, 0, 1),    # BERT-base, 4x512 tokens: the mask transformers builds
    _shape(8, 16, 16, 512, 64, 0, 0),    # BERT-large, a key-padding mask
    _shape(4, 12, 12, 512, 64, 1, 1),    # the additive (finfo.min) form of older transformers
    _shape(2, 32, 8, 2048, 128, 0, 1),   # LLaMA-3-8B heads, a padded causal batch
)
CPU_SHAPES = (
    _shape(2, 2, 2, 24, 16, 0, 1),
    _shape(2, 4, 2, 24, 32, 1, 0),
    _shape(2, 2, 1, 33, 64, 1, 1),
)
GPU_EDGE_SHAPES = (_shape(1, 12, 12, 1, 64, 0, 1), _shape(3, 12, 12, 777, 64, 1, 1),
                   _shape(5, 32, 8, 1023, 128, 0, 0))
# 263 tokens: several query tiles and more than two key blocks of the widest BLOCK_N (with one, a kernel that
# counts something once per block or skips blocks by a few mask rows passed); a bool key-padding
# mask at B = 2 (a kernel that read batch 0's padding for every row passed at B = 1)
CPU_EDGE_SHAPES = (_shape(1, 1, 1, 1, 16, 0, 1), _shape(2, 3, 1, 17, 32, 0, 0), _shape(3, 2, 2, 19, 64, 0, 1),
                   _shape(1, 1, 1, 263, 16, 0, 1))
FIXED_DIMS = ("H", "Hkv", "D", "additive", "per_query")


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None = None):
    scores, v = scaled_scores(q, k, v, scale)
    return attend(scores, mask, v).to(q.dtype)


def with_mask(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The scores with a bool mask (-inf where False) or an additive one (in the scores' dtype).
    In float64 (the judge's reference) the sum is rounded through float32, where every kernel
    adds it at best: fp16's finfo.min (-65504) rows keep the scores on a grid of 2^-8 there, and
    the exact float64 sum put a correct fp32 kernel at 0.99x the fp16 bound (the attention
    starters, finfo-min-rows, one draw in a hundred; it failed CI)."""
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    summed = scores + mask.to(scores.dtype)
    return summed.float().double() if scores.dtype == torch.float64 else summed


def attend(scores: torch.Tensor, mask: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(scores with the mask) v, in the scores' dtype; a row whose every key is masked
    gives zeros, as SDPA gives."""
    scores = with_mask(scores, mask)
    dead = scores.amax(dim=-1, keepdim=True) == float("-inf")
    probs = scores.masked_fill(dead, 0.0).softmax(dim=-1).masked_fill(dead, 0.0)
    return probs @ v


def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None = None):
    """What a Hugging Face model runs: scaled_dot_product_attention with the mask, the kv heads
    repeated first as transformers does when there is a mask.  Timed as the eager baseline."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def visible_keys(shape: Shape, device: str, gen: torch.Generator) -> torch.Tensor:
    """A bool [B, 1, Sm, S] mask as padded batches make: each batch row keeps its first L_b keys
    (L_b drawn in 1..S, one row unpadded); then a fifth of the remaining keys (key padding) or
    (query, key) pairs (per_query) is hidden at random, each row's first key kept, so no row is
    entirely masked."""
    b, s = shape["B"], shape["S"]
    lengths = torch.randint(1, s + 1, (b,), generator=gen, device=device)
    lengths[torch.randint(0, b, (1,), generator=gen, device=device)] = s
    keys = torch.arange(s, device=device)[None, :] < lengths[:, None]
    if not shape["per_query"]:
        # holes inside the kept keys (key 0 stays): a kernel that read a key mask as the interval
        # between its first and last visible key, never loading it, passed while every drawn key
        # mask was a prefix
        keys &= torch.rand((b, s), generator=gen, device=device) > 0.2
        keys[:, 0] = True
        return keys[:, None, None, :]
    kept = torch.rand((b, 1, s, s), generator=gen, device=device) > 0.2
    mask = keys[:, None, None, :] & kept
    mask[..., 0] = True
    return mask


def left_padded(shape: Shape, device: str, gen: torch.Generator) -> torch.Tensor:
    """A bool [B, 1, Sm, S] mask of left-padded sequences: batch row b's first P_b keys hidden
    (P_b drawn in 1..S-1, one row unpadded), causal too when per query (its first P_b query rows
    see no key)."""
    b, s = shape["B"], shape["S"]
    pads = torch.randint(1, max(s, 2), (b,), generator=gen, device=device).clamp(max=max(s - 1, 0))
    pads[torch.randint(0, b, (1,), generator=gen, device=device)] = 0
    keys = torch.arange(s, device=device)[None, :] >= pads[:, None]
    if not shape["per_query"]:
        return keys[:, None, None, :]
    causal = torch.ones((s, s), dtype=torch.bool, device=device).tril()
    return keys[:, None, None, :] & causal[None, None]


def sliding_window(shape: Shape, device: str, gen: torch.Generator) -> torch.Tensor:
    """A bool [B, 1, S, S] causal mask over a window of W keys (W drawn in 1..max(S // 3, 1)):
    query i sees keys i - W + 1 .. i, as Gemma-2's, Mistral's and GPT-OSS's local layers."""
    b, s = shape["B"], shape["S"]
    w = int(torch.randint(1, max(s // 3, 1) + 1, (1,), generator=gen, device=device))
    i = torch.arange(s, device=device)
    band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - w)
    return band[None, None].expand(b, 1, s, s)


def as_additive(visible: torch.Tensor, dtype: torch.dtype, gen: torch.Generator, fill: float,
                bias: bool = True, bias_scale: float = 1.0) -> torch.Tensor:
    """``visible`` as an additive mask in ``dtype``: a random bias of ``bias_scale`` (ALiBi-like: a
    kernel must add the values, not only test them) where visible, ``fill`` elsewhere."""
    values = torch.randn(visible.shape, generator=gen, device=visible.device) * bias_scale if bias else \
        torch.zeros(visible.shape, device=visible.device)
    return values.masked_fill(~visible, fill).to(dtype)


# fp32 masks: biases of this scale drawn in fp32 (bf16 and fp16 round them by ~0.03 and ~0.004),
# finfo(fp32).min at masked keys (-inf in bf16 and fp16: rows of it uniform, not dead).  Built
# in q's dtype and widened, every fp32 mask was exact in q's dtype, and a kernel that cast it
# there passed.
FP32_MASK_BIAS = 8.0


def fp32_additive(visible: torch.Tensor, gen: torch.Generator, fill: float) -> torch.Tensor:
    return as_additive(visible, torch.float32, gen, fill, bias_scale=FP32_MASK_BIAS).contiguous()


def fill_choices(dtype: torch.dtype) -> tuple[float, ...]:
    """What additive masks put at masked keys: transformers' ``finfo(dtype).min``, and -inf."""
    return (torch.finfo(dtype).min, float("-inf"))


def make_mask(shape: Shape, dtype: torch.dtype, device: str, gen: torch.Generator, seed: int,
              visible: torch.Tensor | None = None) -> torch.Tensor:
    visible = visible_keys(shape, device, gen) if visible is None else visible
    if not shape["additive"]:
        return visible.contiguous()
    # every fourth draw in fp32, as models build masks too: the numerics stage's fp32-mask case
    # alone passing one told a kernel which call it was (a form no regular draw took)
    if seed % 4 == 3:
        return fp32_additive(visible, gen, choose(fill_choices(torch.float32), seed // 3))
    return as_additive(visible, dtype, gen, choose(fill_choices(dtype), seed // 3)).contiguous()


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    b, h, hkv, s, d = (shape[n] for n in ("B", "H", "Hkv", "S", "D"))
    q = randn((b, h, s, d), dtype, device, gen)
    k = randn((b, hkv, s, d), dtype, device, gen)
    v = randn((b, hkv, s, d), dtype, device, gen)
    return q, k, v, make_mask(shape, dtype, device, gen, seed), draw_scale(d, seed)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    q, k, v, mask, scale = make_inputs(shape, dtype, device, seed)  # every case passes scale (attention.py)
    gen = generator(device, seed + 1)
    b, h, s = shape["B"], shape["H"], shape["S"]
    sm = s if shape["per_query"] else 1

    def form(visible: torch.Tensor, fill: float | None = None) -> torch.Tensor:
        if not shape["additive"]:
            return visible.contiguous()
        return as_additive(visible, dtype, gen, fill_choices(dtype)[1] if fill is None else fill).contiguous()

    everything = torch.ones((b, 1, sm, s), dtype=torch.bool, device=device)
    # every key of some query rows masked (per_query), or of a whole batch row (key padding)
    dead = everything.clone()
    if shape["per_query"]:
        dead[:, :, ::3, :] = False
    else:
        dead[0] = False
    # one key visible per row: the output is that key's value row
    one = torch.zeros_like(everything)
    one[..., s - 1] = True
    if shape["per_query"] and s > 1:
        one[..., 1::2, s - 1] = False
        one[..., 1::2, 0] = True
    # padding of different lengths per batch row, lengths 1 .. S
    lengths = torch.linspace(1, s, b, device=device).round().long()
    padded = (torch.arange(s, device=device)[None, :] < lengths[:, None])[:, None, None, :].expand(b, 1, sm, s)
    # a mask per head (as position biases make): each head hides other keys, key 0 stays
    per_head = visible_keys(shape, device, gen) & (torch.rand((1, h, 1, s), generator=gen, device=device) > 0.3)
    per_head[..., 0] = True
    cases = [
        ("projection-layout", tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)) + (mask, scale)),
        ("packed-qkv-layout", (*packed_qkv(q, k, v), mask, scale)),
        ("all-visible", (q, k, v, form(everything), scale)),
        ("fully-masked-rows", (q, k, v, form(dead), scale)),
        ("one-key-visible", (q, k, v, form(one), scale)),
        ("padding-per-row", (q, k, v, form(padded), scale)),
        # a mask shared by the batch, and one per head: size-1 dimensions broadcast
        ("batch-shared-mask", (q, k, v, mask[:1].contiguous(), scale)),
        ("per-head-mask", (q, k, v, form(per_head), scale)),
        ("large-logits", ((q.float() * (20 * logit_gain(shape["D"], scale))).to(dtype), k, v, mask, scale)),
        ("explicit-scale", (q, k, v, mask, 2.0 / shape["D"] ** 0.5)),
    ]
    # the drawn mask over scores that rise along the keys: the best visible key comes late
    cases.append(("rising-scores", (*rising_scores(q, k, scale, gen), v, mask, scale)))
    # the masks generation makes: left padding (key 0 hidden, with the causal pattern the padded
    # query rows see nothing) and a causal sliding window (a band: a kernel that skips a key block
    # from a few rows of its mask tile, exact for causal masks, loses the window's start)
    cases.append(("left-padded", (q, k, v, form(left_padded(shape, device, gen)), scale)))
    if shape["per_query"]:
        cases.append(("sliding-window", (q, k, v, form(sliding_window(shape, device, gen)), scale)))
    if shape["additive"]:
        # transformers' padding value at masked keys, and whole rows of it: not masked out but
        # uniform over the keys (finfo.min swamps the scores), as SDPA computes it
        cases.append(("finfo-min-rows", (q, k, v, form(dead, torch.finfo(dtype).min), scale)))
        # an fp32 mask with bf16/fp16 q, k, v (SDPA takes it; models build masks in fp32), and rows
        # of fp32's finfo.min (-inf once cast to bf16 or fp16: a dead row, not a uniform one)
        cases.append(("fp32-mask", (q, k, v, fp32_additive(visible_keys(shape, device, gen), gen, torch.finfo(torch.float32).min),
                                    scale)))
        cases.append(("fp32-finfo-min-rows", (q, k, v, fp32_additive(dead, gen, torch.finfo(torch.float32).min), scale)))
    return cases


def flops(shape: Shape) -> float:
    return 4.0 * shape["B"] * shape["H"] * shape["S"] ** 2 * shape["D"]


def nbytes(shape: Shape, dtype: torch.dtype) -> float:
    b, h, hkv, s, d = (shape[n] for n in ("B", "H", "Hkv", "S", "D"))
    mask_rows = b * (s if shape["per_query"] else 1)
    mask_size = element_size(dtype) if shape["additive"] else 1
    return float((2 * b * h * s * d + 2 * b * hkv * s * d) * element_size(dtype) + mask_rows * s * mask_size)


def make_problem() -> Problem:
    return Problem(
        kind="attention_masked",
        description="scaled dot-product attention forward with a bool or additive mask (padded batches, GQA)",
        signature=("kernel_fn(q[B,H,S,D], k[B,Hkv,S,D], v[B,Hkv,S,D], mask[B|1,H|1,S|1,S] bool or additive, "
                   "scale=None) -> [B,H,S,D]"),
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
