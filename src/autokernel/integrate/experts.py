"""Appliers for ``moe_experts`` and ``moe_experts_gptoss``: mixture-of-experts experts modules with
3-D weights (Mixtral's, Qwen-MoE's: ``recognize.moe_experts_dims``; GPT-OSS's:
``recognize.gptoss_experts_dims``) switched to the op.  Their ``forward(hidden,
top_k_index, top_k_weights)`` becomes one call of our kernel; a call it was not judged on
(another dtype or width, 3-D hidden states, int32 indices, extra arguments) runs the module's
own forward, which dispatches by transformers' ``experts_implementation`` as before.  Routing
weights in half precision (Qwen2-MoE's router casts them to the model's dtype) reach the kernel
in fp32, the dtype it was judged on.

Each class is probed first: its own forward, on a few random tokens routed by a random
router, must match the problem's reference with the module's weights.
"""
from __future__ import annotations

from typing import Any

import torch

from ..recognize import gptoss_experts_dims, moe_experts_dims
from .fused import _probe_call
from .patching import _pick, _probe_input, _reference, _swap_class
from .selection import KernelOp


def _probe_args(m: torch.nn.Module, experts: int, width: int) -> tuple:
    """The appliers' probe tokens, each routed to its top two experts by a random router."""
    x = _probe_input(width, m, m.gate_up_proj.dtype)
    gen = torch.Generator(device="cpu").manual_seed(4321)
    logits = torch.randn(x.shape[0], experts, generator=gen)
    probs, index = torch.topk(torch.softmax(logits, dim=-1), min(2, experts), dim=-1)
    return x, index.to(x.device), (probs / probs.sum(-1, keepdim=True)).to(x.device)


def _judged_routing(hidden: Any, index: Any, weights: Any, dtype: torch.dtype, width: int) -> bool:
    """A call of the kind the experts kernels are judged on: [T, D] hidden states of the dtype and
    width, int64 [T, K] indices, floating [T, K] routing weights, at least one token."""
    return (isinstance(hidden, torch.Tensor) and isinstance(index, torch.Tensor) and isinstance(weights, torch.Tensor)
            and hidden.dtype == dtype and hidden.dim() == 2 and hidden.shape[-1] == width and hidden.shape[0] > 0
            and index.dtype == torch.long and index.dim() == 2 and weights.shape == index.shape
            and weights.is_floating_point())


def _experts_members(k: KernelOp, width: int, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, hidden_states, top_k_index, top_k_weights, *args, **kwargs):
        if not args and not kwargs and _judged_routing(hidden_states, top_k_index, top_k_weights, dtype, width):
            # fp32 weights as the kernel was judged on (Qwen2-MoE's router casts them to the model's dtype)
            return op(hidden_states, top_k_index, top_k_weights.float(), self.gate_up_proj, self.down_proj)
        return base_forward(self, hidden_states, top_k_index, top_k_weights, *args, **kwargs)

    return {"forward": forward}


def _apply_moe_experts(model, k, done, replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], "moe_experts", name) is None:
            continue
        dims = moe_experts_dims(m)
        if dims is None:
            continue
        experts, width, _ = dims
        if m.gate_up_proj.dtype != k.dtype or m.down_proj.dtype != k.dtype:
            skipped.append((name, f"moe_experts: expert weights are not {k.dtype}"))
            continue
        base = type(m)
        args = _probe_args(m, experts, width)
        if not _probe_call(probed, (base, "moe_experts"), lambda: base.forward(m, *args),
                           lambda: _reference("moe_experts")(*args, m.gate_up_proj, m.down_proj), k.dtype):
            skipped.append((name, f"moe_experts: {base.__name__} computes something else (probe mismatch)"))
            continue
        _swap_class(m, ("moe_experts", k.opname, width), _experts_members(k, width, base))
        done.add(id(m))
        replaced.append((name, "moe_experts"))


def _gptoss_members(k: KernelOp, width: int, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, hidden_states, router_indices=None, routing_weights=None, *args, **kwargs):
        if not args and not kwargs and _judged_routing(hidden_states, router_indices, routing_weights, dtype, width):
            # fp32 routing weights, as the kernel was judged on (the router gives them in the model's dtype)
            return op(hidden_states, router_indices, routing_weights.float(), self.gate_up_proj, self.gate_up_proj_bias,
                      self.down_proj, self.down_proj_bias, float(self.alpha), float(self.limit))
        return base_forward(self, hidden_states, router_indices, routing_weights, *args, **kwargs)

    return {"forward": forward}


def _apply_moe_experts_gptoss(model, k, done, replaced, skipped, probed) -> None:
    """GPT-OSS's experts (``recognize.gptoss_experts_dims``) switched to the op, each class probed
    first against the problem's reference with the module's weights, alpha and limit."""
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], "moe_experts_gptoss", name) is None:
            continue
        dims = gptoss_experts_dims(m)
        if dims is None:
            continue
        experts, width, _ = dims
        weights = (m.gate_up_proj, m.gate_up_proj_bias, m.down_proj, m.down_proj_bias)
        if any(w.dtype != k.dtype for w in weights):
            skipped.append((name, f"moe_experts_gptoss: expert weights and biases are not {k.dtype}"))
            continue
        base = type(m)
        args = _probe_args(m, experts, width)
        if not _probe_call(probed, (base, "moe_experts_gptoss"), lambda: base.forward(m, *args),
                           lambda: _reference("moe_experts_gptoss")(*args, *weights, float(m.alpha), float(m.limit)),
                           k.dtype):
            skipped.append((name, f"moe_experts_gptoss: {base.__name__} computes something else (probe mismatch)"))
            continue
        _swap_class(m, ("moe_experts_gptoss", k.opname, width), _gptoss_members(k, width, base))
        done.add(id(m))
        replaced.append((name, "moe_experts_gptoss"))
