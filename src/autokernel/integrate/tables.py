"""Applier for ``rotary_table``: Hugging Face ``*RotaryEmbedding`` modules (default RoPE, a 1-D
``inv_freq``, handed to the op as fp32) switched to the op, which computes both cos/sin tables from the position
ids in one kernel.  A call with 2-D int64 position ids and hidden states of the kernel's dtype
runs the op; anything else runs the module's own forward.  Each class is probed first: its
forward must match the problem's reference (with the module's ``attention_scaling``)."""
from __future__ import annotations

from typing import Any

import torch

from ..recognize import is_rotary_table
from .fused import _probe_call
from .patching import _model_device, _pick, _reference, _swap_class
from .selection import KernelOp


def _table_members(k: KernelOp, scaling: float, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x, position_ids, *args, **kwargs):
        inv = self.inv_freq
        if (not args and not kwargs and isinstance(position_ids, torch.Tensor) and position_ids.dtype == torch.long
                and position_ids.dim() == 2 and position_ids.numel() > 0 and x.dtype == dtype
                and position_ids.device == inv.device and inv.is_floating_point() and inv.dim() == 1):
            return op(position_ids, inv.float(), scaling, x)
        return base_forward(self, x, position_ids, *args, **kwargs)

    return {"forward": forward}


def _apply_rotary_table(model, k, done, replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        if id(m) in done or not is_rotary_table(m) or _pick([k], "rotary_table", name) is None:
            continue
        scaling = getattr(m, "attention_scaling", 1.0)
        if not isinstance(scaling, (int, float)) or isinstance(scaling, bool):
            skipped.append((name, "rotary_table: attention_scaling is not a number"))
            continue
        scaling = float(scaling)
        base = type(m)
        device = _model_device(model)
        x = torch.randn(2, 3, 8, device=device).to(k.dtype)
        pos = (torch.arange(3, device=device)[None, :] + torch.tensor([[5], [900]], device=device))
        if not _probe_call(probed, (base, "rotary_table", scaling), lambda: base.forward(m, x, pos),
                           lambda: _reference("rotary_table")(pos, m.inv_freq, scaling, x), k.dtype):
            skipped.append((name, f"rotary_table: {base.__name__} computes something else (probe mismatch)"))
            continue
        _swap_class(m, ("rotary_table", k.identity, scaling), _table_members(k, scaling, base))
        done.add(id(m))
        replaced.append((name, "rotary_table"))
