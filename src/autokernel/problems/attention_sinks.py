"""attention_sinks: ``kernel_fn(q[B,H,S,D], k[B,Hkv,S,D], v[B,Hkv,S,D], mask, scale, sinks[H])``.

Attention with a learned sink logit per head, as GPT-OSS computes it: each query row's softmax
runs over its scaled, masked scores and one more logit, the head's sink, whose probability is
dropped (it takes a share of the mass and attends to nothing):

    s = scale * q k^T (+ mask | masked to -inf)
    p = softmax([s, sinks[h]])[..., :-1]
    o = p v

A row whose every key is masked gives zeros (the sink takes all of it).  Transformers runs
GPT-OSS through its eager attention with the mask it builds for eager attention (``[B, 1, S, S]``,
``finfo.min`` at the keys a query does not see: causal, and the 128-key sliding window on
every other layer), so the mask forms, dims and mask cases are ``attention_masked``'s; a kind
of its own so that ``attention_masked``'s ``kernel_fn`` stays valid.

``sinks`` is the model's parameter, ``[H]`` in q's dtype.  Even input draws take sinks around
the scores' level (N(0, 1.5), as trained sinks sit), odd ones from [-8, 8] plus one head far
above every score (where there are several), so a kernel must read each head's own value; ``scale`` is drawn as for the
other attention kinds (``attention.draw_scale``).  Reference: the math definition in at least
fp32 (the harness passes fp64 copies on CPU).  Held-out and edge shapes keep D, H, Hkv and the
mask form.  FLOPs: 4·B·H·S²·D; bytes: q, k, v, o and the mask once (the sinks are H values).
"""
from __future__ import annotations

import torch

from . import attention_masked as masked
from .attention import grouped_heads_error, head_strided_layout, heldout, logit_gain, scaled_scores
from .base import Problem, generator

DIMS = masked.DIMS
_shape = masked._shape

GPU_SHAPES = (
    _shape(4, 64, 8, 1024, 64, 1, 1),   # GPT-OSS heads (64 query, 8 kv, D 64), the causal mask eager gets
    _shape(1, 64, 8, 4096, 64, 1, 1),
    _shape(2, 64, 8, 2048, 64, 1, 1),
    _shape(4, 64, 8, 1024, 64, 0, 0),   # a bool key-padding mask
)
CPU_SHAPES = (
    _shape(2, 4, 1, 24, 32, 1, 1),
    _shape(1, 4, 2, 33, 16, 0, 1),
    _shape(2, 2, 2, 20, 64, 1, 0),
)
GPU_EDGE_SHAPES = (_shape(1, 64, 8, 1, 64, 1, 1), _shape(3, 64, 8, 777, 64, 1, 1), _shape(5, 64, 8, 1023, 64, 0, 0))
CPU_EDGE_SHAPES = (_shape(1, 1, 1, 1, 16, 1, 1), _shape(2, 3, 1, 17, 32, 0, 0), _shape(3, 2, 2, 19, 64, 1, 1),
                   _shape(1, 1, 1, 263, 16, 1, 1))  # several tiles and key blocks (attention_masked)
FIXED_DIMS = masked.FIXED_DIMS

SINK_SPREAD = 1.5
SINK_RANGE = 8.0


def with_sinks(scores: torch.Tensor, mask: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """softmax over [scores with the mask, the head's sink], the sink's column dropped."""
    scores = masked.with_mask(scores, mask)
    b, h, s, _ = scores.shape
    sink = sinks.to(scores.dtype).reshape(1, h, 1, 1).expand(b, h, s, 1)
    return torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None,
              sinks: torch.Tensor):
    scores, v = scaled_scores(q, k, v, scale)
    return (with_sinks(scores, mask, sinks) @ v).to(q.dtype)


def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None,
          sinks: torch.Tensor):
    """What transformers' eager attention runs for GPT-OSS: the kv heads repeated, the scores and
    the softmax in the input dtype, the row max taken out first.  Timed as the eager baseline; the
    judge stays ``reference``."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    b, h, s, _ = scores.shape
    combined = torch.cat([scores, sinks.reshape(1, h, 1, 1).expand(b, h, s, 1).to(scores.dtype)], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    return torch.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1].to(v.dtype) @ v


def draw_sinks(h: int, dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
    gen = generator(device, seed + 31)
    if seed % 2 == 0:
        sinks = torch.randn(h, generator=gen, device=device) * SINK_SPREAD
    else:
        sinks = (torch.rand(h, generator=gen, device=device) * 2 - 1) * SINK_RANGE
        if h > 1:  # one head far above its scores; never the only one (its tiny output hides errors)
            sinks[torch.randint(0, h, (1,), generator=gen, device=device)] = 4 * SINK_RANGE
    return sinks.to(dtype)


def make_inputs(shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    return masked.make_inputs(shape, dtype, device, seed) + (draw_sinks(shape["H"], dtype, device, seed),)


def adversarial_inputs(shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    """``attention_masked``'s cases (every mask form, layouts, large logits, dead rows, rising
    scores), each with the draw's sinks, and the cases of the sinks themselves."""
    sinks = draw_sinks(shape["H"], dtype, device, seed)
    cases = [(name, args + (sinks,)) for name, args in masked.adversarial_inputs(shape, dtype, device, seed)]
    q, k, v, mask, scale = masked.make_inputs(shape, dtype, device, seed)
    gen = generator(device, seed + 3)
    h = shape["H"]
    gain = logit_gain(shape["D"], scale)
    alternating = torch.tensor([40.0, -40.0], device=device).repeat((h + 1) // 2)[:h]
    # sinks far below the scores where rows see no key (or only finfo.min): the sink still takes
    # all of the mass and the row is zeros (a kernel that drops a low sink writes NaN or the mean
    # of v there; the draws' sinks stop at -8)
    low = -(10.0 + 30.0 * torch.rand(h, generator=gen, device=device))
    masks = dict((name, args[3]) for name, args in cases)
    for name in ("fully-masked-rows", "left-padded", "finfo-min-rows"):
        if name in masks:
            cases += [(f"{name}-low-sinks", (q, k, v, masks[name], scale, low.to(dtype))),
                      (f"{name}-sinks-far-below", (q, k, v, masks[name], scale,
                                                    torch.full((h,), -1e4, device=device).to(dtype)))]
    return cases + [
        # the sinks far above every score: each row's output is its attention times ~e^-20, a
        # kernel must keep the sink in its running max (one that adds exp(sink) at the end
        # overflows or flushes) and the row's own scale
        ("sinks-far-above", (q, k, v, mask, scale, torch.full((h,), 20.0, device=device).to(dtype))),
        # far below: attention_masked's output (a kernel that pivots its exponents on the sink
        # overflows)
        ("sinks-far-below", (q, k, v, mask, scale, torch.full((h,), -1e4, device=device).to(dtype))),
        # heads by turns far above and far below the scores: the sink of each head, not the first's
        ("alternating-heads", (q, k, v, mask, scale, alternating.to(dtype))),
        # large scores against sinks at their level: the row max and the sink swap roles by row
        ("large-logits-with-sinks", ((q.float() * (8 * gain)).to(dtype), k, v, mask, scale,
                                     (torch.randn(h, generator=gen, device=device) * 8).to(dtype))),
    ]


def make_problem() -> Problem:
    return Problem(
        kind="attention_sinks",
        description="attention forward with a learned sink logit per head (GPT-OSS) and a bool or additive mask, GQA",
        signature=("kernel_fn(q[B,H,S,D], k[B,Hkv,S,D], v[B,Hkv,S,D], mask[B|1,H|1,S|1,S] bool or additive, "
                   "scale, sinks[H] in q's dtype) -> [B,H,S,D]"),
        dims=DIMS,
        reference=reference,
        eager=eager,
        make_inputs=make_inputs,
        flops=masked.flops,
        bytes=masked.nbytes,
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
