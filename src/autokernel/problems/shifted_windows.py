"""shifted_windows: Swin's cyclic shift and window partition in one copy, or its inverse,
``kernel_fn(x, height, width, window, shift, reverse) -> out`` in x's dtype::

    reverse = 0:  x[B, H, W, C] -> out[B*nh*nw, window, window, C]   (nh = H/window, nw = W/window)
        out[(b*nh + i)*nw + j, p, q, c] = x[b, (i*window + p + shift) % H, (j*window + q + shift) % W, c]
    reverse = 1:  x[B*nh*nw, window*window, C] -> out[B, H, W, C]
        out[b, r, s, c] = x[(b*nh + r'//window)*nw + s'//window, (r' % window)*window + s' % window, c]
        with r' = (r - shift) % H, s' = (s - shift) % W

The first is ``window_partition(torch.roll(x, (-shift, -shift), (1, 2)), window)`` of transformers'
``SwinLayer`` (its normalised, padded hidden states cut into windows for attention), the second
``torch.roll(window_reverse(attn, window, H, W), (shift, shift), (1, 2))`` (the attention's
windows put back in place).  ``shift`` is 0 in every other layer (no roll), ``H`` and ``W`` are
the padded grid's (multiples of ``window``).  A pure permutation of elements: the reference is
exact and so must a kernel be (NaN and infinities are moved as they are).

Bytes, Swin-T at 224x224 (stage 1: H = W = 56, C = 96, window 7, shift 3), one image, fp32
(e = 4), N = B H W C elements = 301,056 (1.2 MB): fused, either direction reads x once and
writes the output once, ``2 N e`` (2.4 MB).  Eager, before attention: ``maybe_pad``'s F.pad
(a copy even with nothing to pad, 2 N e), ``torch.roll`` (2 N e, shifted layers) and
``window_partition``'s ``.contiguous()`` of the transposed view (2 N e): 6 N e shifted, 4 N e
not; after attention: ``window_reverse``'s ``.contiguous()`` and the roll, 4 N e shifted, 2 N e
not.  Per pair of layers (one shifted, one not) eager moves 16 N e, the op 8 N e (``eager_bytes``):
8 N e saved, 9.6 MB at stage 1, 21.7 MB over Swin-T's stages (N, N/2, N/4 at stages 1-3 with
1, 1, 3 pairs of layers: 9.6 + 4.8 + 7.2 MB; stage 4's 7x7 grid is one window, unshifted, whose
partition is a view: nothing to save there).  Folding the LayerNorm before it into the
same pass (normalised values written in window order) would save 2 N e more per layer, and the
reverse + residual add + next LayerNorm another 2 N e; both are left to kinds of their own (the
norms are placed as ``layernorm`` / ``add_layernorm`` problems now).
FLOPs: none (counted as 0).
"""
from __future__ import annotations

import random

import torch

from .base import Problem, Shape, element_size, generator, randn, standard_adversarial, with_nonfinite


def _grid(shape: Shape) -> tuple[int, int]:
    return shape["H"] // shape["window"], shape["W"] // shape["window"]


def reference(x: torch.Tensor, height: int, width: int, window: int, shift: int, reverse: int) -> torch.Tensor:
    nh, nw = height // window, width // window
    if not reverse:
        b, c = x.shape[0], x.shape[-1]
        if shift:
            x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
        x = x.reshape(b, nh, window, nw, window, c).transpose(2, 3)
        return x.contiguous().view(-1, window, window, x.shape[-1])
    c = x.shape[-1]
    x = x.reshape(-1, nh, nw, window, window, c).transpose(2, 3).contiguous().view(-1, height, width, c)
    return torch.roll(x, shifts=(shift, shift), dims=(1, 2)) if shift else x


def input_shape(shape: Shape) -> tuple[int, ...]:
    nh, nw = _grid(shape)
    if shape["reverse"]:
        return (shape["B"] * nh * nw, shape["window"] * shape["window"], shape["C"])
    return (shape["B"], shape["H"], shape["W"], shape["C"])


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    x = randn(input_shape(shape), dtype, device, generator(device, seed))
    return (x, shape["H"], shape["W"], shape["window"], shape["shift"], shape["reverse"])


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    x, *rest = make_inputs(shape, dtype, device, seed + 1)
    gen = generator(device, seed + 7919)
    cases = standard_adversarial(x, gen, large=1e4)
    cases.append(("nonfinite", with_nonfinite(x, gen)))
    # every element its own flat index (exact in fp32 up to 2^24): a misplaced element shows
    index = torch.arange(x.numel(), device=device, dtype=torch.float32).reshape(x.shape)
    cases.append(("index", (index % 2048 if dtype != torch.float32 else index).to(dtype)))
    return [(name, (t, *rest)) for name, t in cases]


def heldout(shape: Shape, rng: random.Random) -> Shape:
    """The same window, shift, channels and direction; another batch and another grid of windows
    (odd counts, H != W)."""
    nh, nw = _grid(shape)
    out = dict(shape)
    out["B"] = max(1, shape["B"] + rng.choice((-1, 1)))
    out["H"] = shape["window"] * max(1, nh + rng.choice((-1, 1)))
    out["W"] = shape["window"] * (nw + 1)
    return out


def check_shape(shape: Shape) -> str | None:
    if shape["H"] % shape["window"] or shape["W"] % shape["window"]:
        return f"H ({shape['H']}) and W ({shape['W']}) must be multiples of window ({shape['window']})"
    if shape["shift"] >= shape["window"]:
        return f"shift ({shape['shift']}) must be smaller than window ({shape['window']})"
    return None


def flops(shape: Shape) -> float:
    return 0.0


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return 2.0 * shape["B"] * shape["H"] * shape["W"] * shape["C"] * element_size(dtype)


def eager_bytes(shape: Shape, dtype: torch.dtype) -> float:
    """What SwinLayer moves for the same step: before attention F.pad, the roll (shifted) and the
    partition's copy; after it the reverse's copy and the roll (shifted); 2 N e each."""
    copies = (2 if shape["reverse"] else 3) - (0 if shape["shift"] else 1)
    return copies * bytes_moved(shape, dtype)


def _s(b: int, h: int, w: int, c: int, window: int, shift: int, reverse: int) -> Shape:
    return {"B": b, "H": h, "W": w, "C": c, "window": window, "shift": shift, "reverse": reverse}


def make_problem() -> Problem:
    return Problem(
        kind="shifted_windows",
        description="Swin's cyclic shift + window partition in one copy (reverse = 0), or window reverse + "
                    "the shift back (reverse = 1)",
        signature="kernel_fn(x, height: int, width: int, window: int, shift: int, reverse: int) -> out  "
                  "# reverse=0: x[B,H,W,C] -> windows[B*nh*nw, window, window, C] of torch.roll(x, -shift) ; "
                  "reverse=1: x[B*nh*nw, window*window, C] -> out[B,H,W,C] rolled by +shift",
        dims=("B", "H", "W", "C", "window", "shift", "reverse"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        # Swin-T/B at 224x224, batch 64: stage 1 (56x56, C 96 / 128) and stage 3 (14x14, C 384), window 7
        gpu_shapes=(_s(64, 56, 56, 96, 7, 3, 0), _s(64, 56, 56, 96, 7, 3, 1), _s(64, 56, 56, 128, 7, 0, 0),
                    _s(64, 14, 14, 384, 7, 3, 1)),
        cpu_shapes=(_s(2, 4, 8, 8, 4, 2, 0), _s(1, 8, 4, 12, 4, 2, 1), _s(1, 4, 4, 20, 4, 0, 0)),
        gpu_edge_shapes=(_s(1, 7, 7, 1, 7, 3, 0), _s(3, 21, 35, 37, 7, 3, 1), _s(1, 5, 5, 96, 5, 0, 1),
                         _s(2, 12, 12, 33, 12, 6, 0), _s(1, 1, 1, 3, 1, 0, 0)),
        cpu_edge_shapes=(_s(1, 3, 3, 1, 3, 1, 0), _s(3, 6, 9, 5, 3, 1, 1), _s(1, 1, 1, 3, 1, 0, 1)),
        fixed_dims=("C", "window", "shift", "reverse"),
        zero_dims=frozenset({"shift"}),
        adversarial_inputs=adversarial_inputs,
        heldout=heldout,
        check_shape=check_shape,
    )
