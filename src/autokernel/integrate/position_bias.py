"""Applier for ``relative_position_bias``: T5-style attention modules that hold a relative position
bias table (``relative_attention_bias``; T5 gives one to the first layer of each stack) get a
``compute_bias`` that runs the op: the buckets, the table lookup and the permute in one kernel.

A call with plain integer lengths and ``past_seen_tokens``, the table in the kernel's dtype on the
device asked for, and a table size and ``max_distance`` with log buckets, runs the op with the
module's own settings read at the call (``relative_attention_max_distance``, bidirectional unless
``is_decoder``); anything else (a tensor of seen tokens, a table of another dtype) runs the
module's own ``compute_bias``.  Each class is probed first, on the module's own table: its
``compute_bias(query_length, key_length, device=, past_seen_tokens=)`` must give the problem's
reference bit for bit, at distances that reach T5's bucket boundaries and with a cache offset.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn as nn

from ..problems import get_problem
from ..problems.position_buckets import side_buckets
from ..recognize import relative_bias_parts
from .ops import traced_as_original
from .patching import _pick, _swap_class, dtype_reason
from .selection import KernelOp

# (query_length, key_length, past_seen_tokens) of the probe: keys on both sides, distances past T5's
# 16, 32, 64 and 128, a decoding step after a cache, a short square
PROBE_CALLS = ((5, 300, 0), (1, 200, 199), (3, 3, 0))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def takes_past_seen_tokens(method: Any) -> bool:
    """Is ``method`` T5's ``compute_bias(self, query_length, key_length, device=None,
    past_seen_tokens=0)`` by its parameters (older transformers took ``cache_position``)?"""
    try:
        names = list(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return False
    return names[:3] == ["self", "query_length", "key_length"] and "past_seen_tokens" in names and "device" in names


def computes_t5_bias(m: nn.Module, base: type, both: bool, max_distance: int, probed: dict) -> bool:
    """Does ``base.compute_bias`` give T5's bias bit for bit on ``m``'s table: the problem's eager
    chain, T5's ops on the table's device (the problem's reference buckets on the CPU, where a
    device's float log may pick another row at a boundary distance)?"""
    key = (base, "relative_position_bias", m.relative_attention_num_buckets, max_distance, both)
    if key not in probed:
        table = m.relative_attention_bias.weight
        reference = get_problem("relative_position_bias").eager
        try:
            with torch.no_grad():
                probed[key] = all(
                    torch.equal(base.compute_bias(m, q, k, device=table.device, past_seen_tokens=past),
                                reference(table, q, k, past, both, max_distance))
                    for q, k, past in PROBE_CALLS)
        except Exception:  # noqa: BLE001 - a compute_bias that does not take these calls is not this kind
            probed[key] = False
    return probed[key]


def _bias_members(k: KernelOp, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_compute_bias = base.compute_bias

    def compute_bias(self, query_length, key_length, device=None, past_seen_tokens=0):
        table = self.relative_attention_bias.weight
        parts = relative_bias_parts(self)
        if (parts is not None and _whole(query_length) and _whole(key_length) and _whole(past_seen_tokens)
                and query_length > 0 and key_length > 0 and past_seen_tokens >= 0 and table.dtype == dtype
                and (device is None or torch.device(device) == table.device)
                and self.relative_attention_bias.max_norm is None
                and 1 <= side_buckets(parts[0], parts[2])[1] < parts[1] and not traced_as_original(op)):
            return op(table, query_length, key_length, past_seen_tokens, parts[2], parts[1])
        return base_compute_bias(self, query_length, key_length, device=device, past_seen_tokens=past_seen_tokens)

    return {"compute_bias": compute_bias}


def _apply_relative_position_bias(model, k, done, replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        parts = relative_bias_parts(m)
        if parts is None or _pick([k], "relative_position_bias", name) is None:
            continue
        buckets, max_distance, both = parts
        base = type(m)
        table = m.relative_attention_bias
        if table.weight.dtype != k.dtype:
            skipped.append((name, dtype_reason("relative_position_bias", table.weight.dtype, k.dtype)))
            continue
        if type(table).forward is not nn.Embedding.forward or not takes_past_seen_tokens(base.compute_bias):
            skipped.append((name, f"relative_position_bias: {base.__name__}.compute_bias is not T5's "
                                  "(query_length, key_length, device, past_seen_tokens) on an nn.Embedding"))
            continue
        if not 1 <= side_buckets(buckets, both)[1] < max_distance:
            skipped.append((name, f"relative_position_bias: {buckets} buckets, max_distance {max_distance}: "
                                  "no log buckets"))
            continue
        if not computes_t5_bias(m, base, both, max_distance, probed):
            skipped.append((name, f"relative_position_bias: {base.__name__}.compute_bias computes something else "
                                  "(probe mismatch)"))
            continue
        _swap_class(m, ("relative_position_bias", k.identity), _bias_members(k, base))
        done.add(id(m))
        replaced.append((name, "relative_position_bias"))
