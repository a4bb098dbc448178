"""``F.softmax`` and ``F.linear`` called in a module's forward (the MoE routers' ``F.linear(h,
self.weight)`` then ``softmax(logits, dtype=torch.float, dim=-1)``, in Mixtral, Qwen2-MoE,
Qwen3-MoE, OLMoE as transformers writes them): ``calls`` rebinds them in the methods of a module
the softmax or matmul problem names (that module itself, not one around it) to these
replacements, which run the op on the calls it takes and hand the rest to PyTorch.

The matmul kernel takes ``b[K, N]`` contiguous: a module whose methods' linear is rebound keeps a
transposed copy of each of its own 2-D weights of the op's dtype (``_autokernel_t_<name>``, as a
switched ``nn.Linear`` keeps ``_autokernel_weight_t``; inference only), found by the weight
passed, and a call with any other weight goes to ``F.linear``."""
from __future__ import annotations

import weakref
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .ops import rows
from .selection import KernelOp

# id(weight) -> (the weight, weakly; the module holding its transposed copy, weakly; that buffer's
# name): the entry dies with the weight, and the copy follows the module through ``.to()``
_TRANSPOSED: dict[int, tuple[weakref.ref, weakref.ref, str]] = {}


def keep_transposed(m: nn.Module, dtype: torch.dtype) -> int:
    """Register a contiguous transposed copy of each 2-D parameter of ``m``'s own (not its
    children's) of ``dtype`` for the linear replacement to find; how many."""
    n = 0
    for pname, p in m.named_parameters(recurse=False):
        if p.dim() != 2 or p.dtype != dtype:
            continue
        buffer = f"_autokernel_t_{pname}"
        m.register_buffer(buffer, p.detach().t().contiguous(), persistent=False)
        key = id(p)
        _TRANSPOSED[key] = (weakref.ref(p, lambda _, key=key: _TRANSPOSED.pop(key, None)), weakref.ref(m), buffer)
        n += 1
    return n


def _transposed(weight: Any) -> torch.Tensor | None:
    entry = _TRANSPOSED.get(id(weight))
    if entry is None or entry[0]() is not weight:
        return None
    module = entry[1]()
    wt = getattr(module, entry[2], None) if module is not None else None
    return wt if isinstance(wt, torch.Tensor) and wt.device == weight.device else None


def linear_replacement(k: KernelOp) -> Callable[..., Any]:
    """``F.linear`` through the matmul op, for a weight ``keep_transposed`` registered."""
    op, dtype = k.op, k.dtype
    original = F.linear

    def linear(input, weight, bias=None):
        wt = _transposed(weight)
        if (wt is not None and isinstance(input, torch.Tensor) and input.dtype == dtype
                and input.shape[-1] == wt.shape[0] and input.numel() > 0):
            out = op(input.reshape(-1, wt.shape[0]), wt)
            if bias is not None:
                out = out + bias
            return out.reshape(*input.shape[:-1], wt.shape[1])
        return original(input, weight, bias)

    return linear


def softmax_replacement(k: KernelOp, original: Callable[..., Any] = F.softmax) -> Callable[..., Any]:
    """``F.softmax`` (or ``torch.softmax``: ``original``) through the softmax op, over the last dim;
    with ``dtype`` the input is converted first, as PyTorch does, and the op takes it in that dtype."""
    op, dtype_ = k.op, k.dtype

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if isinstance(input, torch.Tensor) and input.dim() >= 1 and input.numel() > 0 and isinstance(dim, int) \
                and dim in (-1, input.dim() - 1):
            x = input if dtype is None else input.to(dtype)
            if x.dtype == dtype_:
                return op(rows(op, x, x.shape[-1])).reshape(x.shape)
        if original is F.softmax:
            return original(input, dim, _stacklevel, dtype)
        return original(input, dim, dtype=dtype)

    return softmax
