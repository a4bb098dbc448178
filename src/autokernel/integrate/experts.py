"""Applier for ``moe_experts`` and ``moe_experts_gptoss``: mixture-of-experts experts modules with
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

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn

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


@dataclass(frozen=True)
class ExpertsLayout:
    """What an experts kind needs of a module: its (E, D, I) (None: not this layout) and the op's
    arguments after the routing, from the module."""

    kind: str
    dims: Callable[[nn.Module], tuple[int, int, int] | None]
    params: Callable[[nn.Module], tuple]
    routing: tuple[str, str]  # the forward's names of the indices and the weights


LAYOUTS = {
    "moe_experts": ExpertsLayout("moe_experts", moe_experts_dims, lambda m: (m.gate_up_proj, m.down_proj),
                                 ("top_k_index", "top_k_weights")),
    "moe_experts_gptoss": ExpertsLayout(
        "moe_experts_gptoss", gptoss_experts_dims,
        lambda m: (m.gate_up_proj, m.gate_up_proj_bias, m.down_proj, m.down_proj_bias, float(m.alpha), float(m.limit)),
        ("router_indices", "routing_weights")),
}


def _routing(args: tuple, kwargs: dict, names: tuple[str, str]) -> tuple | None:
    """(indices, weights) of a call that passes exactly those two, by position or by name."""
    rest = names[len(args):] if len(args) <= 2 else None
    if rest is None or set(kwargs) != set(rest):
        return None
    return tuple(args) + tuple(kwargs[n] for n in rest)


def _experts_members(k: KernelOp, width: int, base: type, layout: ExpertsLayout) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, hidden_states, *args, **kwargs):
        routing = _routing(args, kwargs, layout.routing)
        if routing is not None and _judged_routing(hidden_states, *routing, dtype, width):
            # fp32 routing weights, as the kernel was judged on (Qwen2-MoE's and GPT-OSS's routers
            # give them in the model's dtype)
            return op(hidden_states, routing[0], routing[1].float(), *layout.params(self))
        return base_forward(self, hidden_states, *args, **kwargs)

    return {"forward": forward}


def _apply_experts(model, k, done, replaced, skipped, probed) -> None:
    """Experts modules in ``k``'s layout (``LAYOUTS``) switched to the op, each class probed first:
    its own forward on routed random tokens against the problem's reference with the module's
    weights."""
    layout = LAYOUTS[k.kind]
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], k.kind, name) is None:
            continue
        dims = layout.dims(m)
        if dims is None:
            continue
        experts, width, _ = dims
        params = layout.params(m)
        if any(isinstance(p, torch.Tensor) and p.dtype != k.dtype for p in params):
            skipped.append((name, f"{k.kind}: expert weights are not {k.dtype}"))
            continue
        base = type(m)
        args = _probe_args(m, experts, width)
        if not _probe_call(probed, (base, k.kind), lambda: base.forward(m, *args),
                           lambda: _reference(k.kind)(*args, *params), k.dtype):
            skipped.append((name, f"{k.kind}: {base.__name__} computes something else (probe mismatch)"))
            continue
        _swap_class(m, (k.kind, k.identity, width), _experts_members(k, width, base, layout))
        done.add(id(m))
        replaced.append((name, k.kind))
