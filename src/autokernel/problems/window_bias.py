"""window_bias: the additive mask of Swin's window attention, the relative position bias plus the
shifted windows' region mask, written once,
``kernel_fn(table[T, heads], index[S*S], batch, height, width, window, shift) -> out`` in the
table's dtype (S = window^2, nh = height/window, nw = width/window, nW = nh*nw)::

    bias[h, i, j] = table[index[i*S + j], h]
    shift = 0:  out[1, heads, S, S]          = bias
    shift > 0:  out[b*nW + w, heads, S, S]   = bias[h, i, j] + (-100 where region(w, i) != region(w, j), else 0)

where region(w, i), for token i = (p, q) of window w = (u, v) at grid position (r, c) =
(u*window + p, v*window + q), is ``3 * R(r, height) + R(c, width)`` with
``R(r, n) = (r >= n - window) + (r >= n - shift)``: the nine regions the cyclic shift brings
together (transformers' ``SwinLayer.get_attn_mask``).  It is what ``SwinAttention`` hands its
attention as the mask: ``SwinRelativePositionBias``'s ``table[index].view(S, S, heads)
.permute(2, 0, 1).contiguous().unsqueeze(0)``, plus, in a shifted layer, the layer's region mask
(about a dozen small ops on arange'd coordinates: ge, to, add, mul, the windows' partition, sub,
ne, masked_fill, eq, masked_fill) expanded over the batch (a reshape of an expanded tensor: a copy)
and added.  ``index`` is an input (the model's buffer; the judge draws it at random in [0, T)), so a
kernel reads it rather than assuming Swin's layout.

Bytes, Swin-T stage 1 at 224x224 (56x56 grid, window 7: S = 49, nW = 64, 3 heads), batch 64,
fp32: the output is B nW heads S^2 e = 118 MB, written once (table and index: 2 KB and 19 KB).
Eager in a shifted layer: the gather and the permute's copy (S^2 heads, 2 x 2 x 29 KB), the region
mask (nW S^2 = 154 K elements through ~10 ops: ~6 MB), the expand's reshape copy (B nW S^2 e =
39 MB written, from a 0.6 MB mask read again and again), the add (reads the bias and that 39 MB
copy, writes 118 MB): about 203 MB against 118 MB.  A cleaner cut would keep this mask out of memory entirely: an attention
kernel that reads the [heads, S, S] bias and computes the region test per score (a Swin variant of
``attention_masked``); this kind is the step that takes the mask's many small ops and the copies
now, and whose output the existing ``attention_masked`` problem reads as before.
FLOPs: one add per output element.
"""
from __future__ import annotations

import random
from typing import Any

import torch

from .base import Problem, Shape, element_size, generator, randn, with_nonfinite
from .shifted_windows import check_shape  # the same grid: whole windows, a shift inside one

MASKED = -100.0  # what transformers' get_attn_mask fills between regions


def regions(height: int, width: int, window: int, shift: int, device: Any = "cpu") -> torch.Tensor:
    """[nW, S] region ids of each window's tokens (transformers' ``get_attn_mask`` image mask,
    partitioned into windows)."""
    h = torch.arange(height, device=device)
    w = torch.arange(width, device=device)
    hr = (h >= height - window).long() + (h >= height - shift).long()
    wr = (w >= width - window).long() + (w >= width - shift).long()
    image = hr[:, None] * 3 + wr[None, :]
    nh, nw = height // window, width // window
    return image.view(nh, window, nw, window).transpose(1, 2).reshape(nh * nw, window * window)


def reference(table: torch.Tensor, index: torch.Tensor, batch: int, height: int, width: int, window: int,
              shift: int) -> torch.Tensor:
    s = window * window
    bias = table[index].view(s, s, -1).permute(2, 0, 1).unsqueeze(0)  # [1, heads, S, S]
    if not shift:
        return bias.contiguous()
    ids = regions(height, width, window, shift, table.device)
    mask = torch.where(ids[:, None, :] != ids[:, :, None], MASKED, 0.0).to(table.dtype)  # [nW, S, S]
    mask = mask.unsqueeze(1).unsqueeze(0).expand(batch, -1, -1, -1, -1).reshape(-1, 1, s, s)
    return bias + mask


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    window = shape["window"]
    entries = (2 * window - 1) ** 2
    table = randn((entries, shape["heads"]), dtype, device, gen)
    index = torch.randint(0, entries, (window ** 4,), generator=gen, device=device)
    return (table, index, shape["B"], shape["H"], shape["W"], window, shape["shift"])


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    table, index, *rest = make_inputs(shape, dtype, device, seed + 1)
    gen = generator(device, seed + 7919)
    big = min(1e4, float(torch.finfo(dtype).max) / 4)
    cases = [("large", (table.float() * big).to(dtype)), ("tiny", (table.float() * 1e-3).to(dtype)),
             ("near-minus-100", (100.0 + table.float() * 1e-2).to(dtype)),  # bias + mask cancels to ~0
             ("nonfinite", with_nonfinite(table, gen))]
    out = [(name, (t, index, *rest)) for name, t in cases]
    # Swin's own index: every relative offset of two tokens of a window
    p = torch.arange(shape["window"], device=device)
    coords = torch.stack(torch.meshgrid(p, p, indexing="ij")).flatten(1)
    rel = coords[:, :, None] - coords[:, None, :] + shape["window"] - 1
    swin = (rel[0] * (2 * shape["window"] - 1) + rel[1]).flatten()
    out.append(("swin-index", (table, swin, *rest)))
    return out


def heldout(shape: Shape, rng: random.Random) -> Shape:
    """The same window, shift and heads; another batch and another grid of windows."""
    out = dict(shape)
    out["B"] = max(1, shape["B"] + rng.choice((-1, 1)))
    out["H"] = shape["window"] * max(1, shape["H"] // shape["window"] + rng.choice((-1, 1)))
    out["W"] = shape["window"] * (shape["W"] // shape["window"] + 1)
    return out


def out_elements(shape: Shape) -> int:
    n_windows = (shape["H"] // shape["window"]) * (shape["W"] // shape["window"])
    rows = shape["B"] * n_windows if shape["shift"] else 1
    return rows * shape["heads"] * shape["window"] ** 4


def flops(shape: Shape) -> float:
    return float(out_elements(shape)) if shape["shift"] else 0.0


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    e = element_size(dtype)
    table = (2 * shape["window"] - 1) ** 2 * shape["heads"] * e
    return out_elements(shape) * e + table + shape["window"] ** 4 * 8


def _s(b: int, h: int, w: int, heads: int, window: int, shift: int) -> Shape:
    return {"B": b, "H": h, "W": w, "heads": heads, "window": window, "shift": shift}


def make_problem() -> Problem:
    return Problem(
        kind="window_bias",
        description="Swin's window attention mask: relative position bias (table[index]) plus the shifted "
                    "windows' region mask (-100 between regions), written once",
        signature="kernel_fn(table[T,heads], index[S*S] int64, batch: int, height: int, width: int, window: int, "
                  "shift: int) -> out  # S = window^2; shift=0: [1,heads,S,S] = table[index]; shift>0: "
                  "[batch*nW,heads,S,S] = bias + region mask",
        dims=("B", "H", "W", "heads", "window", "shift"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        # Swin-T at 224x224, batch 64: stage 1 (56x56, 3 heads) shifted and not, stage 3 (14x14, 12 heads)
        gpu_shapes=(_s(64, 56, 56, 3, 7, 3), _s(64, 56, 56, 3, 7, 0), _s(64, 14, 14, 12, 7, 3)),
        cpu_shapes=(_s(2, 8, 8, 2, 4, 2), _s(1, 8, 12, 3, 4, 0), _s(1, 6, 9, 2, 3, 1)),
        gpu_edge_shapes=(_s(1, 7, 7, 1, 7, 3), _s(3, 21, 35, 5, 7, 3), _s(2, 12, 12, 4, 12, 6), _s(1, 1, 1, 1, 1, 0)),
        cpu_edge_shapes=(_s(1, 3, 3, 1, 3, 1), _s(3, 6, 9, 5, 3, 1), _s(1, 1, 1, 2, 1, 0)),
        fixed_dims=("heads", "window", "shift"),
        zero_dims=frozenset({"shift"}),
        adversarial_inputs=adversarial_inputs,
        heldout=heldout,
        check_shape=check_shape,
    )
