"""Applier for ``xielu``: xIELU activation modules (transformers' ``XIELUActivation``, Apertus' MLP)
switched to one op call.

The op takes the module's four numbers as its forward computes them (``recognize.xielu_scalars``:
``softplus(alpha_p)`` and ``beta + softplus(alpha_n)`` in the parameters' dtype, ``beta`` and
``eps``), read once and again only after one of the four tensors was written (their version
counters, or a new tensor in their place: ``load_state_dict``, an optimizer step), so that a
forward neither syncs with the device nor computes the softplus each call.

Every class is probed first on two inputs, N(0, 9) values and values around ``eps`` (from 4 eps
up to -2 eps, where the clamp decides the output): the module's own forward must match the
problem's reference with those numbers, or the module is left alone.  A call the op was not
judged on (another dtype, extra arguments, an empty tensor), and torch.compile tracing with the
op handed to inductor, run the module's own forward.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from ..recognize import XIELU_ATTRS, is_xielu_module, xielu_scalars
from .fused import _probe_call
from .ops import traced_as_original
from .patching import _pick, _probe_input, _reference, _swap_class

SCALARS = "_autokernel_xielu_scalars"


def _tensors_key(m: nn.Module) -> tuple:
    return tuple((id(t), t._version) for t in (getattr(m, name) for name in XIELU_ATTRS))


def current_scalars(m: nn.Module) -> tuple[float, float, float, float]:
    """The module's (alpha_p, alpha_n, beta, eps), read again where one of its tensors changed
    since they were last read (never while torch.compile traces: the numbers read are constants)."""
    cached = m.__dict__.get(SCALARS)
    if torch.compiler.is_compiling() and cached is not None:
        return cached[1]
    key = _tensors_key(m)
    if cached is None or cached[0] != key:
        cached = (key, xielu_scalars(m))
        m.__dict__[SCALARS] = cached
    return cached[1]


def _apply_xielu(model, k, done, replaced, skipped, probed) -> None:
    op, dtype = k.op, k.dtype
    reference = _reference("xielu")
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], "xielu", name) is None or not is_xielu_module(m):
            continue
        base = type(m)
        base_forward = base.forward
        scalars = current_scalars(m)
        eps = scalars[3]
        regular = _probe_input(64, m, dtype) * 3
        around_eps = (torch.linspace(4.0, -2.0, 64) * eps).reshape(1, 64).to(device=regular.device, dtype=dtype)
        if not all(_probe_call(probed, (base, "xielu", scalars, which), lambda x=x: base_forward(m, x),
                               lambda x=x: reference(x, *scalars), dtype)
                   for which, x in (("regular", regular), ("around-eps", around_eps))):
            skipped.append((name, f"xielu: {base.__name__} computes something else (probe mismatch)"))
            continue

        def forward(self, x: Any, *args, base_forward=base_forward, **kwargs):
            if (not args and not kwargs and isinstance(x, torch.Tensor) and x.dtype == dtype and x.dim() >= 1
                    and x.numel() > 0 and not traced_as_original(op)):
                return op(x.reshape(-1, x.shape[-1]), *current_scalars(self)).reshape(x.shape)
            return base_forward(self, x, *args, **kwargs)

        _swap_class(m, ("xielu", k.identity), {"forward": forward})
        done.add(id(m))
        replaced.append((name, "xielu"))
