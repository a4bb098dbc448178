"""Applier for ``embedding``: ``torch.nn.Embedding`` modules (token embeddings) switched to the
op.  A call with int64 ids and the kernel's dtype runs the op on the flattened ids; anything
else (int32 ids, another dtype) runs ``nn.Embedding.forward``.  Modules with ``max_norm``
(which renormalises the table in place) are left alone."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from .patching import _pick, _swap_class
from .selection import KernelOp


def _embedding_members(k: KernelOp, n: int) -> dict[str, Any]:
    op, dtype = k.op, k.dtype

    def forward(self, ids):
        w = self.weight
        if ids.dtype == torch.long and w.dtype == dtype and w.shape[1] == n and ids.numel() > 0:
            return op(ids.reshape(-1), w).reshape(*ids.shape, n)
        return nn.Embedding.forward(self, ids)

    return {"forward": forward}


def _apply_embedding(model, k, done, replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        if id(m) in done or type(m).forward is not nn.Embedding.forward or _pick([k], "embedding", name) is None:
            continue
        if m.max_norm is not None:
            skipped.append((name, "embedding: max_norm renormalises the table in place; not this kind"))
            continue
        if m.weight.dtype != k.dtype:
            skipped.append((name, f"embedding: weight dtype {m.weight.dtype} is not the kernel's {k.dtype}"))
            continue
        _swap_class(m, ("embedding", k.opname, m.embedding_dim), _embedding_members(k, m.embedding_dim))
        done.add(id(m))
        replaced.append((name, "embedding"))
