"""Applier for ``moe_experts`` and ``moe_experts_gptoss``: mixture-of-experts experts modules with
3-D weights (Mixtral's, Qwen-MoE's: ``recognize.moe_experts_dims``; GPT-OSS's:
``recognize.gptoss_experts_dims``) switched to the op.  Their ``forward(hidden,
top_k_index, top_k_weights)`` becomes one call of our kernel; a call it was not judged on
(another dtype or width, 3-D hidden states, int32 indices, extra arguments) runs the module's
own forward, which dispatches by transformers' ``experts_implementation`` as before.  Routing
weights in half precision (Qwen2-MoE's router casts them to the model's dtype) reach the kernel
in fp32, the dtype it was judged on.

DBRX's experts (``recognize.experts_blocks_dims``) keep each projection as one [E x I, D] block
and take hidden states [B, S, D]: they are ``moe_experts`` on a packed copy of their weights, made
once when switched (gate and up stacked [E, 2I, D], down transposed [E, D, I]: the expert weights
are held twice, as the switched linears' transposed weights are; inference only, a later change of
the weights is not seen), the hidden states' rows the tokens, the output in the module's shape.

Each class is probed first: its own forward, on a few random tokens routed by a random
router, must match the problem's reference with the module's weights.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn

from ..recognize import experts_blocks_dims, gptoss_experts_dims, moe_experts_dims
from .fused import _probe_call
from .patching import _pick, _probe_input, _reference, _swap_class
from .selection import KernelOp


def _probe_args(m: torch.nn.Module, experts: int, width: int, dtype: torch.dtype,
                weights_dtype: torch.dtype = torch.float32) -> tuple:
    """The appliers' probe tokens, each routed to its top two experts by a random router whose
    weights come in ``weights_dtype``."""
    x = _probe_input(width, m, dtype)
    gen = torch.Generator(device="cpu").manual_seed(4321)
    logits = torch.randn(x.shape[0], experts, generator=gen)
    probs, index = torch.topk(torch.softmax(logits, dim=-1), min(2, experts), dim=-1)
    return x, index.to(x.device), (probs / probs.sum(-1, keepdim=True)).to(x.device, weights_dtype)


def _judged_routing(hidden: Any, index: Any, weights: Any, dtype: torch.dtype, width: int,
                    any_rank: bool = False) -> bool:
    """A call of the kind the experts kernels are judged on: [T, D] hidden states of the dtype and
    width (``any_rank``: [..., D] with T rows), int64 [T, K] indices, floating [T, K] routing
    weights, at least one token."""
    return (isinstance(hidden, torch.Tensor) and isinstance(index, torch.Tensor) and isinstance(weights, torch.Tensor)
            and hidden.dtype == dtype and (hidden.dim() == 2 or (any_rank and hidden.dim() > 2))
            and hidden.shape[-1] == width and hidden.numel() > 0
            and index.dtype == torch.long and index.dim() == 2 and index.shape[0] * width == hidden.numel()
            and weights.shape == index.shape and weights.is_floating_point())


@dataclass(frozen=True)
class ExpertsLayout:
    """What an experts kind needs of a module: its (E, D, I) (None: not this layout) and the op's
    arguments after the routing, from the module."""

    kind: str
    dims: Callable[[nn.Module], tuple[int, int, int] | None]
    params: Callable[[nn.Module], tuple]
    routing: tuple[str, str]  # the forward's names of the indices and the weights
    # hidden states of any rank, their rows the tokens, the output shaped as the module's forward
    # shapes it (DBRX's: ``view(hidden.shape[0], -1, D)``); else [T, D] in and out
    any_rank: bool = False
    keep: Callable[[nn.Module], None] | None = None  # makes what ``params`` takes, once, on the switched module
    # the router hands its weights over in the model's dtype (DBRX's softmax keeps the logits' dtype,
    # and its experts' index_add_ refuses fp32 products into bf16 states), else in fp32
    weights_in_model_dtype: bool = False


GATE_UP, DOWN = "_autokernel_gate_up", "_autokernel_down"


def _packed_blocks(m: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """DBRX's [E x I, D] blocks as moe_experts' weights: the kept copy, or one made now (the probe's)."""
    if GATE_UP in m._buffers:
        return m._buffers[GATE_UP], m._buffers[DOWN]
    E, D, I = experts_blocks_dims(m)
    glu = m.mlp
    with torch.no_grad():
        gate_up = torch.cat((glu.w1.detach().view(E, I, D), glu.v1.detach().view(E, I, D)), dim=1)
        down = glu.w2.detach().view(E, I, D).transpose(1, 2).contiguous()
    return gate_up, down


def _keep_packed_blocks(m: nn.Module) -> None:
    gate_up, down = _packed_blocks(m)
    m.register_buffer(GATE_UP, gate_up, persistent=False)
    m.register_buffer(DOWN, down, persistent=False)


LAYOUTS = {
    "moe_experts": (
        ExpertsLayout("moe_experts", moe_experts_dims, lambda m: (m.gate_up_proj, m.down_proj),
                      ("top_k_index", "top_k_weights")),
        ExpertsLayout("moe_experts", experts_blocks_dims, _packed_blocks, ("top_k_index", "top_k_weights"),
                      any_rank=True, keep=_keep_packed_blocks, weights_in_model_dtype=True)),
    "moe_experts_gptoss": (ExpertsLayout(
        "moe_experts_gptoss", gptoss_experts_dims,
        lambda m: (m.gate_up_proj, m.gate_up_proj_bias, m.down_proj, m.down_proj_bias, float(m.alpha), float(m.limit)),
        ("router_indices", "routing_weights")),),
}


def _shaped(layout: ExpertsLayout, hidden: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The op's [T, D] output in the shape the module's own forward gives."""
    return out.view(hidden.shape[0], -1, out.shape[-1]) if layout.any_rank else out


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
        if routing is not None and _judged_routing(hidden_states, *routing, dtype, width, layout.any_rank):
            # fp32 routing weights, as the kernel was judged on (Qwen2-MoE's and GPT-OSS's routers
            # give them in the model's dtype)
            out = op(hidden_states.reshape(-1, width), routing[0], routing[1].float(), *layout.params(self))
            return _shaped(layout, hidden_states, out)
        return base_forward(self, hidden_states, *args, **kwargs)

    return {"forward": forward}


def _apply_experts(model, k, done, replaced, skipped, probed) -> None:
    """Experts modules in ``k``'s layout (``LAYOUTS``) switched to the op, each class probed first:
    its own forward on routed random tokens against the problem's reference with the module's
    weights."""
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], k.kind, name) is None:
            continue
        layout, dims = next(((lay, lay.dims(m)) for lay in LAYOUTS[k.kind] if lay.dims(m) is not None), (None, None))
        if dims is None:
            continue
        experts, width, _ = dims
        params = layout.params(m)
        if any(isinstance(p, torch.Tensor) and p.dtype != k.dtype for p in params):
            skipped.append((name, f"{k.kind}: expert weights are not {k.dtype}"))
            continue
        base = type(m)
        args = _probe_args(m, experts, width, params[0].dtype,
                           params[0].dtype if layout.weights_in_model_dtype else torch.float32)
        # hidden states [1, T, D] where the module takes any rank (DBRX's shape)
        hidden = args[0][None] if layout.any_rank else args[0]
        if not _probe_call(probed, (base, k.kind), lambda: base.forward(m, hidden, *args[1:]),
                           lambda: _shaped(layout, hidden, _reference(k.kind)(*args, *params)), k.dtype):
            skipped.append((name, f"{k.kind}: {base.__name__} computes something else (probe mismatch)"))
            continue
        if layout.keep is not None:
            layout.keep(m)
        _swap_class(m, (k.kind, k.identity, width, layout.any_rank), _experts_members(k, width, base, layout))
        done.add(id(m))
        replaced.append((name, k.kind))
