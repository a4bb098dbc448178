"""Applier for ``embedding``: ``torch.nn.Embedding`` modules (token embeddings), and subclasses
that multiply the rows by a constant (Gemma's scaled word embedding), switched to the op.  A
call with int64 ids and the kernel's dtype runs the op on the flattened ids; anything else
(int32 ids, another dtype) runs the module's own forward.  Modules with ``max_norm`` (which
renormalises the table in place) are left alone; a subclass is probed first (its forward
against ``weight[ids] * scale``).  A subclass whose forward computes its ids and hands them to
``super().forward`` (the learned position embeddings of OPT, BART, mBART, BioGPT and their kin:
``super().forward(position_ids + self.offset)``; Marian's and Pegasus's sinusoidal ones) keeps its
forward: the op goes where ``super().forward`` leads (``patching._swap_base_forward``)."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from ..recognize import embedding_scale
from .fused import _probe_call
from .norms import _original_class, calls_super_forward
from .patching import _pick, _reference, _swap_base_forward, _swap_class, dtype_reason
from .selection import KernelOp


def _embedding_members(k: KernelOp, n: int, scale: float, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, ids):
        w = self.weight
        if ids.dtype == torch.long and w.dtype == dtype and w.shape[1] == n and ids.numel() > 0:
            return op(ids.reshape(-1), w, scale).reshape(*ids.shape, n)
        return base_forward(self, ids)

    return {"forward": forward}


def _apply_embedding(model, k, done, replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        if id(m) in done or not isinstance(m, nn.Embedding) or _pick([k], "embedding", name) is None:
            continue
        scale = embedding_scale(m)
        if m.max_norm is not None:
            skipped.append((name, "embedding: max_norm renormalises the table in place; not this kind"))
            continue
        if scale is None and calls_super_forward(_original_class(type(m))):
            if m.weight.dtype != k.dtype:
                skipped.append((name, dtype_reason("embedding", m.weight.dtype, k.dtype)))
                continue
            _swap_base_forward(m, ("embedding", k.identity, m.embedding_dim), nn.Embedding,
                               _embedding_members(k, m.embedding_dim, 1.0, nn.Embedding))
            done.add(id(m))
            replaced.append((name, "embedding"))
            continue
        if scale is None:
            skipped.append((name, f"embedding: {type(m).__name__}.forward is not a row gather times a constant"))
            continue
        if m.weight.dtype != k.dtype:
            skipped.append((name, dtype_reason("embedding", m.weight.dtype, k.dtype)))
            continue
        base = type(m)
        if base.forward is not nn.Embedding.forward:
            ids = torch.arange(min(m.num_embeddings, 7), device=m.weight.device).flip(0)
            if not _probe_call(probed, (base, "embedding", scale), lambda: base.forward(m, ids),
                               lambda: _reference("embedding")(ids, m.weight, scale), k.dtype):
                skipped.append((name, f"embedding: {base.__name__} computes something else (probe mismatch)"))
                continue
        _swap_class(m, ("embedding", k.identity, m.embedding_dim, scale),
                    _embedding_members(k, m.embedding_dim, scale, base))
        done.add(id(m))
        replaced.append((name, "embedding"))
