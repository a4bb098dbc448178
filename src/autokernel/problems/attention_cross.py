"""attention_cross: ``kernel_fn(q[B,H,Sq,D], k[B,Hkv,Sk,D], v[B,Hkv,Sk,D], mask=None, scale=None)``.

Non-causal attention whose queries and keys have lengths of their own: an encoder-decoder's
cross-attention (BART, mBART, Marian, Pegasus, Whisper: the decoder's Sq queries against the
encoder's Sk states), one step of it while generating (Sq = 1), and any other SDPA call without
``is_causal`` whose query and key lengths differ.  A kind of its own rather than a key length
added to ``attention``: ``attention``'s dims, its plans and every kernel file written for it
(which may read S from q alone) stay valid, and a kernel here is judged on Sq != Sk from its
first stage.  Equal lengths are computed too (held-out draws may meet them).

Dims (B, H, Hkv, Sq, Sk, D, masked, additive, per_query), the last three 0/1:

* ``masked`` 0: ``mask`` is None.  1: a mask as ``scaled_dot_product_attention`` takes it,
  4-D ``[Bm, Hm, Sm, Sk]``, each of Bm, Hm, Sm either 1 (broadcast) or B, H, Sq: ``per_query``
  1 a mask per query row (``[B,1,Sq,Sk]``, as transformers expands an encoder padding mask),
  0 a key-padding mask (``[B,1,1,Sk]``); ``additive`` 0 bool (True where the key is
  attended), 1 a float mask in q's dtype or fp32 added to the scaled scores (finfo.min or -inf
  at masked keys, and a bias elsewhere).  The numerics stage also passes a mask shared by the
  batch and one per head: kernels read the mask through its strides.
* A query row whose every key is masked gives zeros, as SDPA gives (``attention_masked``).

Grouped-query attention when Hkv < H (H % Hkv == 0: query head h reads kv head h // (H // Hkv));
``scale`` None means 1/sqrt(D), drawn as in ``attention`` (``draw_scale``).  Reference: the
math definition in at least fp32 (the harness passes fp64 copies on CPU).  Held-out shapes keep
D, H, Hkv and the mask form and move Sq, Sk (each on its own; Sq = 1 stays 1) and B.
FLOPs: 4·B·H·Sq·Sk·D.  Bytes: q and the output once (B·H·Sq·D each), k and v once
(B·Hkv·Sk·D each), the mask once (B·Sm·Sk entries; one byte each when bool).
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from .attention import draw_scale, grouped_heads_error, head_strided_layout, logit_gain, scaled_scores
from .attention import RISE
from .attention_masked import as_additive, attend, fill_choices, fp32_additive
from .base import Problem, Shape, choose, element_size, generator, randn

DIMS = ("B", "H", "Hkv", "Sq", "Sk", "D", "masked", "additive", "per_query")


def _shape(b: int, h: int, hkv: int, sq: int, sk: int, d: int, masked: int = 0, additive: int = 0,
           per_query: int = 0) -> Shape:
    return dict(zip(DIMS, (b, h, hkv, sq, sk, d, masked, additive, per_query)))


GPU_SHAPES = (
    _shape(4, 20, 20, 448, 1500, 64),          # Whisper-large-v3: 448 decoder tokens against 30 s of audio
    _shape(16, 20, 20, 1, 1500, 64),           # one generation step of it
    _shape(8, 16, 16, 128, 1024, 64, 1, 0, 0),  # BART-large summarising padded articles: key padding
    _shape(8, 16, 16, 128, 1024, 64, 1, 1, 1),  # the expanded additive (finfo.min) form
    _shape(2, 32, 8, 512, 2048, 128),          # grouped kv heads, head_dim 128
)
CPU_SHAPES = (
    _shape(2, 4, 4, 24, 40, 16),
    _shape(2, 4, 2, 1, 33, 32, 1, 0, 0),
    _shape(1, 2, 1, 40, 17, 64, 1, 1, 1),
)
GPU_EDGE_SHAPES = (_shape(2, 20, 20, 3, 1, 64), _shape(3, 16, 16, 777, 1023, 64, 1, 1, 1),
                   _shape(5, 32, 8, 1, 1499, 128, 1, 0, 0),
                   _shape(2, 8, 8, 1024, 77, 40),  # Stable Diffusion's UNet: head_dim 40 against 77 text tokens
                   _shape(8, 16, 16, 1, 1024, 64, 1, 1, 0))  # a decoding step with an additive key mask
# 263 and 261 keys: more than two key blocks of the widest BLOCK_N (a kernel that attends to a
# window of keys, or stops after a block or two, meets them); one key (Sk = 1); one query against
# a bool key mask at B = 3 (each batch row its own padding); a per-query bool mask of odd lengths
CPU_EDGE_SHAPES = (_shape(1, 1, 1, 7, 263, 16), _shape(2, 2, 2, 5, 1, 16), _shape(3, 3, 1, 1, 261, 32, 1, 0, 0),
                   _shape(2, 2, 2, 19, 3, 64, 1, 0, 1), _shape(1, 2, 2, 17, 29, 32, 1, 1, 0),
                   # red-team pass 25: every mask form past two of the widest key blocks (a kernel that
                   # reads the mask in the last, partial block only), one query with an additive mask
                   # and with none (one that reads a decoding step's mask as bool), a head dim that is
                   # no power of two (one that drops the head-dim bound of its loads)
                   _shape(1, 1, 1, 3, 300, 16, 1, 0, 1), _shape(1, 1, 1, 3, 300, 16, 1, 1, 1),
                   _shape(2, 2, 2, 1, 300, 16, 1, 1, 0), _shape(2, 2, 1, 1, 40, 16), _shape(1, 2, 2, 5, 300, 40))
FIXED_DIMS = ("H", "Hkv", "D", "masked", "additive", "per_query")


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              scale: float | None = None):
    scores, v = scaled_scores(q, k, v, scale)
    if mask is None:
        return (scores.softmax(dim=-1) @ v).to(q.dtype)
    return attend(scores, mask, v).to(q.dtype)


def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
          scale: float | None = None):
    """What the models run: scaled_dot_product_attention (the kv heads repeated first where a mask
    comes with grouped heads, as transformers does).  Timed as the eager baseline."""
    group = q.shape[1] // k.shape[1]
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=group > 1)
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def visible_keys(shape: Shape, device: str, gen: torch.Generator) -> torch.Tensor:
    """A bool [B, 1, Sm, Sk] mask as a padded encoder batch makes: batch row b keeps its first L_b
    keys (L_b drawn in 1..Sk, one row unpadded), then a fifth of the kept keys (key padding) or
    (query, key) pairs (per_query) is hidden at random, key 0 kept, so no row is entirely masked."""
    b, sq, sk = shape["B"], shape["Sq"], shape["Sk"]
    lengths = torch.randint(1, sk + 1, (b,), generator=gen, device=device)
    lengths[torch.randint(0, b, (1,), generator=gen, device=device)] = sk
    keys = (torch.arange(sk, device=device)[None, :] < lengths[:, None])[:, None, None, :]
    rows = sq if shape["per_query"] else 1
    mask = keys & (torch.rand((b, 1, rows, sk), generator=gen, device=device) > 0.2)
    mask[..., 0] = True
    return mask


def make_mask(shape: Shape, dtype: torch.dtype, device: str, gen: torch.Generator, seed: int) -> torch.Tensor | None:
    if not shape["masked"]:
        return None
    visible = visible_keys(shape, device, gen)
    if not shape["additive"]:
        return visible.contiguous()
    if seed % 4 == 3:  # every fourth draw in fp32, as models build masks (attention_masked.make_mask)
        return fp32_additive(visible, gen, choose(fill_choices(torch.float32), seed // 3))
    return as_additive(visible, dtype, gen, choose(fill_choices(dtype), seed // 3)).contiguous()


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    b, h, hkv, sq, sk, d = (shape[n] for n in ("B", "H", "Hkv", "Sq", "Sk", "D"))
    q = randn((b, h, sq, d), dtype, device, gen)
    k = randn((b, hkv, sk, d), dtype, device, gen)
    v = randn((b, hkv, sk, d), dtype, device, gen)
    return q, k, v, make_mask(shape, dtype, device, gen, seed), draw_scale(d, seed)


def rising_keys(q: torch.Tensor, k: torch.Tensor, scale: float | None,
                gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``attention.rising_scores`` over Sk keys: every query's scores rise along the keys (a cube
    of the key's position, from about -RISE to +RISE), so the best key comes last and far above
    the first block's (a kernel that keeps the first block's max as its pivot overflows exp)."""
    d, sk = q.shape[-1], k.shape[-2]
    dim = int(torch.randint(0, d, (1,), generator=gen, device=q.device))
    q, k = q.clone(), k.clone()
    q[..., dim] = RISE * d ** 0.5 * logit_gain(d, scale)
    position = torch.linspace(0.0, 1.0, sk, device=k.device, dtype=torch.float64)
    k[..., dim] = (2 * position ** 3 - 1).to(k.dtype)
    return q, k


def packed_kv(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The values of k, v as slices of one [B, Sk, 2 Hkv D] tensor (a fused k|v projection of the
    encoder's states): views whose token stride is that of the packed row."""
    b, hkv, sk, d = k.shape
    packed = torch.empty((b, sk, 2 * hkv * d), dtype=k.dtype, device=k.device)
    views = []
    for t, start in ((k, 0), (v, hkv * d)):
        view = packed[:, :, start:start + hkv * d].view(b, sk, hkv, d).transpose(1, 2)
        view.copy_(t)
        views.append(view)
    return views[0], views[1]


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    # every case passes ``scale`` as the regular draws do (attention.py says why)
    q, k, v, mask, scale = make_inputs(shape, dtype, device, seed)
    gen = generator(device, seed + 1)
    b, h, sq, sk, d = (shape[n] for n in ("B", "H", "Sq", "Sk", "D"))
    exps = torch.randint(-3, 1, (1, 1, sk, 1), generator=gen, device=device).float()
    projected = tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    cases = [
        # q, k, v as the model integration passes them: views of the projections, heads inside tokens
        ("projection-layout", (*projected, mask, scale)),
        ("packed-kv-layout", (projected[0], *packed_kv(k, v), mask, scale)),
        ("large-logits", ((q.float() * (20 * logit_gain(d, scale))).to(dtype), k, v, mask, scale)),
        ("tiny-logits", ((q.float() * 1e-3).to(dtype), k, v, mask, scale)),
        ("mixed-value-scales", (q, k, (v.float() * torch.pow(10.0, exps)).to(dtype), mask, scale)),
        ("explicit-scale", (q, k, v, mask, 2.0 / d ** 0.5)),
        ("rising-scores", (*rising_keys(q, k, scale, gen), v, mask, scale)),
    ]
    if not shape["masked"]:
        return cases
    sm = sq if shape["per_query"] else 1

    def form(visible: torch.Tensor, fill: float | None = None) -> torch.Tensor:
        if not shape["additive"]:
            return visible.contiguous()
        return as_additive(visible, dtype, gen, fill_choices(dtype)[1] if fill is None else fill).contiguous()

    everything = torch.ones((b, 1, sm, sk), dtype=torch.bool, device=device)
    dead = everything.clone()  # every key of some query rows (per query) or of batch row 0 masked
    if shape["per_query"]:
        dead[:, :, ::3, :] = False
    else:
        dead[0] = False
    one = torch.zeros_like(everything)  # one key visible per row: the output is that key's value
    one[..., sk - 1] = True
    if shape["per_query"] and sq > 1:
        one[..., 1::2, sk - 1] = False
        one[..., 1::2, 0] = True
    lengths = torch.linspace(1, sk, b, device=device).round().long()
    padded = (torch.arange(sk, device=device)[None, :] < lengths[:, None])[:, None, None, :].expand(b, 1, sm, sk)
    per_head = visible_keys(shape, device, gen) & (torch.rand((1, h, 1, sk), generator=gen, device=device) > 0.3)
    per_head[..., 0] = True
    cases += [
        ("all-visible", (q, k, v, form(everything), scale)),
        ("fully-masked-rows", (q, k, v, form(dead), scale)),
        ("one-key-visible", (q, k, v, form(one), scale)),
        ("padding-per-row", (q, k, v, form(padded), scale)),
        ("batch-shared-mask", (q, k, v, mask[:1].contiguous(), scale)),
        ("per-head-mask", (q, k, v, form(per_head), scale)),
        # a mask stored keys first, not contiguous (red-team pass 25: a kernel that took the mask's
        # strides from its shape passed, every mask drawn contiguous)
        ("keys-first-mask", (q, k, v, mask.transpose(-1, -2).contiguous().transpose(-1, -2), scale)),
    ]
    if shape["additive"]:
        fp32_min = torch.finfo(torch.float32).min
        cases += [
            ("finfo-min-rows", (q, k, v, form(dead, torch.finfo(dtype).min), scale)),
            ("fp32-mask", (q, k, v, fp32_additive(visible_keys(shape, device, gen), gen, fp32_min), scale)),
            ("fp32-finfo-min-rows", (q, k, v, fp32_additive(dead, gen, fp32_min), scale)),
        ]
    return cases


def heldout(shape: Shape, rng: random.Random) -> Shape:
    """Keep D, H, Hkv and the mask form; move Sq and Sk each by up to ±20% (made odd; a single
    query stays single) and B by ±1."""
    out = dict(shape)
    for dim in ("Sq", "Sk"):
        n = shape[dim]
        if n > 1:
            n = max(2, int(round(n * rng.uniform(0.8, 1.2))))
            out[dim] = n + 1 if n % 2 == 0 else n
    out["B"] = max(1, shape["B"] + rng.choice((-1, 0, 1)))
    return out


def check_shape(shape: Shape) -> str | None:
    if not shape["masked"] and (shape["additive"] or shape["per_query"]):
        return "additive and per_query describe a mask: both 0 when masked is 0"
    return grouped_heads_error(shape)


def flops(shape: Shape) -> float:
    return 4.0 * shape["B"] * shape["H"] * shape["Sq"] * shape["Sk"] * shape["D"]


def nbytes(shape: Shape, dtype: torch.dtype) -> float:
    b, h, hkv, sq, sk, d = (shape[n] for n in ("B", "H", "Hkv", "Sq", "Sk", "D"))
    tensors = (2 * b * h * sq * d + 2 * b * hkv * sk * d) * element_size(dtype)
    mask = 0
    if shape["masked"]:
        mask = b * (sq if shape["per_query"] else 1) * sk * (element_size(dtype) if shape["additive"] else 1)
    return float(tensors + mask)


def make_problem() -> Problem:
    return Problem(
        kind="attention_cross",
        description=("non-causal attention whose query and key lengths differ (encoder-decoder cross-attention), "
                     "optional bool or additive mask, GQA"),
        signature=("kernel_fn(q[B,H,Sq,D], k[B,Hkv,Sk,D], v[B,Hkv,Sk,D], mask=None | [B|1,H|1,Sq|1,Sk] bool or "
                   "additive, scale=None) -> [B,H,Sq,D]"),
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
        check_shape=check_shape,
        adversarial_inputs=adversarial_inputs,
        heldout=heldout,
        passthrough_layout=head_strided_layout,
    )
