"""Applier for ``rotary_table``: Hugging Face ``*RotaryEmbedding`` modules (default RoPE, a 1-D
``inv_freq``, handed to the op as fp32) switched to the op, which computes both cos/sin tables from the position
ids in one kernel.  A module with one table per layer type (ModernBERT's global and local RoPE:
``forward(x, position_ids, layer_type)`` reading ``<type>_inv_freq`` and ``<type>_attention_scaling``)
hands each call its layer type's frequencies and scaling.  A call with 2-D int64 position ids and
hidden states of the kernel's dtype (and a known layer type) runs the op; anything else runs the
module's own forward.  Each class is probed first: its forward must match the problem's reference
(with the module's attention scaling), for every layer type."""
from __future__ import annotations

from typing import Any

import torch

from ..recognize import rotary_table_freqs
from .fused import _probe_call
from .patching import _model_device, _pick, _reference, _swap_class
from .selection import KernelOp


def _table_members(k: KernelOp, scalings: dict[str | None, float], freqs: dict[str | None, str],
                   base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward
    layered = None not in freqs

    def forward(self, x, position_ids, *args, **kwargs):
        extra = dict(kwargs)
        if layered:
            layer_type, rest = (args[0], args[1:]) if args else (extra.pop("layer_type", None), args)
        else:
            layer_type, rest = None, args
        buffer = freqs.get(layer_type) if layer_type is None or isinstance(layer_type, str) else None
        inv = getattr(self, buffer, None) if buffer is not None else None
        if (inv is not None and not rest and not extra and isinstance(position_ids, torch.Tensor)
                and position_ids.dtype == torch.long and position_ids.dim() == 2 and position_ids.numel() > 0
                and x.dtype == dtype and position_ids.device == inv.device and inv.is_floating_point()
                and inv.dim() == 1):
            return op(position_ids, inv.float(), scalings[layer_type], x)
        return base_forward(self, x, position_ids, *args, **kwargs)

    return {"forward": forward}


def _scaling(m, layer_type: str | None) -> float | None:
    value = getattr(m, "attention_scaling" if layer_type is None else f"{layer_type}_attention_scaling", 1.0)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return float(value)


def _apply_rotary_table(model, k, done, replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], "rotary_table", name) is None:
            continue
        freqs = rotary_table_freqs(m)
        if freqs is None:
            continue
        scalings = {t: _scaling(m, t) for t in freqs}
        if any(v is None for v in scalings.values()):
            skipped.append((name, "rotary_table: attention_scaling is not a number"))
            continue
        base = type(m)
        device = _model_device(model)
        x = torch.randn(2, 3, 8, device=device).to(k.dtype)
        pos = (torch.arange(3, device=device)[None, :] + torch.tensor([[5], [900]], device=device))
        ref = _reference("rotary_table")
        key = tuple(sorted((str(t), v) for t, v in scalings.items()))
        ok = all(_probe_call(probed, (base, "rotary_table", key, t),
                             lambda t=t: base.forward(m, x, pos) if t is None else base.forward(m, x, pos, t),
                             lambda t=t: ref(pos, getattr(m, freqs[t]), scalings[t], x), k.dtype)
                 for t in freqs)
        if not ok:
            skipped.append((name, f"rotary_table: {base.__name__} computes something else (probe mismatch)"))
            continue
        _swap_class(m, ("rotary_table", k.identity, key, tuple(sorted(map(str, freqs.values())))),
                    _table_members(k, scalings, freqs, base))
        done.add(id(m))
        replaced.append((name, "rotary_table"))
