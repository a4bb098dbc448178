"""Applier for residual adds written in a forward just before a norm call (``add_rmsnorm`` /
``add_layernorm`` found by ``recognize.pair_residual_adds``): the add and the norm become the
op, and the forward keeps using the sum.

The parent's ``forward`` source is rewritten (its AST), for norm children that the plan names
and that compute the plain norm (probed), in three patterns:

* ``self.norm(a + b)``                       -> ``self.norm(a, b)[0]``
* ``x = a + b`` followed, within a few statements, by one that calls ``self.norm(x)``
                                              -> ``_ak_normed_<i>, x = self.norm(a, b)``, and
  the call replaced by ``_ak_normed_<i> if x is _ak_sum_<i> else self.norm(x)``: the fused
  result where ``x`` still holds that sum when the norm is reached (the norm is pure, so it may
  run where the add ran); the norm as before where a branch between reassigned ``x`` (GPT-2's
  optional cross-attention).  Nothing between may change the sum in place (``x.add_()``,
  ``x += y``, ``x[i] = ...``, also through an alias such as ``residual = x``), and no function
  may be defined there.
* the same with ``x = x.reshape(...)`` (or ``.view``) between (OPT's layer reshapes its sum to
  2-D before its norm)      -> ``x = add_into(self.norm, a, b)``: the add runs the norm's op at
  once, as an add fused *ahead* does (below); the norm returns its rows when it gets a view of
  the sum's rows.

In the first two, the norm child gets a subclass whose ``forward(x, residual=None)`` returns
``(norm(x + residual), x + residual)`` through the op (what it ran before, when called without
a residual).

An add that ends one forward and is normalised by the next module call, in another forward
(the last add of a decoder layer, then the next layer's first norm or the final norm; the plan's
``add_from`` maps that norm to the module holding the add), is fused *ahead*: that module's
forward ends ``return a + b`` or ``x = a + b; return x`` (or such an ``x`` assigned in both
branches of the ``if`` before the return, or as the one such element of a returned tuple; the
sum may be viewed, ``x = (a + b).view(shape)``, and ``if`` statements without ``else`` that add
nothing may stand before the return, as in OPT's layer), and the add becomes
``add_ahead(self, a, b)``, which runs the norm's op at once and leaves the normalised rows with
the norm.  Where the forward's add is a call of a plain function by its name that returns an
add itself (Falcon's ``output = dropout_add(h, residual, p, training)``), the call goes to a
copy of that function whose add is ``add_ahead``, told the module by a keyword.  The norm gets
a subclass that returns the rows only when it is called on that very sum, or a view of its rows
(``rows_of``), unchanged since (the same version counter, the same weight versions), and
normalises what it gets otherwise (a hook that replaced or changed the layer's output).
Under ``torch.compile`` both sides do what they did before (inductor fuses the add into the norm
itself).

Decorators around the forward are kept: each ``functools.wraps`` wrapper is rebuilt around the
rewritten function.  A forward that cannot be rewritten (no source, a closure, no pattern) is
left as it is, and the norms it holds are listed in ``skipped``.

The patterns are found and rewritten in ``residual_sources``; the add fused ahead and its norm
run in ``residual_ahead``; this module picks the norms and switches them.
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable

import torch
import torch.nn as nn

from .norms import _original_class, _takes_residual, layernorm_form, norm_width, rmsnorm_form
from .ops import rows
from .patching import _model_device, _swap_class, dtype_reason, rewrap
from .residual_ahead import NEXT_NORM, _ahead_norm_members
from .residual_sources import rewrite_forward
from .selection import KernelOp


# ------------------------------------------------------------------ which norms
def _plain_norm_params(m: nn.Module, kind: str, dtype: torch.dtype, probed: dict,
                       device: torch.device) -> Callable[[nn.Module], tuple] | None:
    """The op's parameters of a norm child that computes the plain norm of ``kind``, or None."""
    if kind == "add_layernorm":
        form = layernorm_form(m, dtype, probed)
        if form is None:
            return None
        form.prepare(m, dtype, device)
        return form.params
    form = rmsnorm_form(m, dtype, probed)
    return form.params if form is not None else None


def _forward_is(cls: type, forward: Callable) -> bool:
    return _original_class(cls).forward is forward


# ------------------------------------------------------------------ the fused-ahead norm
def _ahead_target(model: nn.Module, norm_name: str, k: KernelOp, probed: dict,
                  skipped: list) -> tuple[nn.Module, Callable[[nn.Module], tuple]] | None:
    """The norm (and its op parameters) that the add ending another forward is fused into."""
    try:
        norm = model.get_submodule(norm_name)
    except AttributeError:
        skipped.append((norm_name, f"{k.kind}: no such module in the model"))
        return None
    params = None if _takes_residual(_original_class(type(norm)).forward) else \
        _plain_norm_params(norm, k.kind, k.dtype, probed, _model_device(model))
    if params is None:
        weight = getattr(norm, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dtype != k.dtype:  # the run's dtype, not the norm's form
            skipped.append((norm_name, dtype_reason(k.kind, weight.dtype, k.dtype)))
        else:
            skipped.append((norm_name, f"{k.kind}: {type(norm).__name__} is not a plain norm of the kind"))
        return None
    return norm, params


# ------------------------------------------------------------------ the applier
def _add_norm_members(k: KernelOp, n: int, params: Callable[[nn.Module], tuple], base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x, residual=None):
        if residual is None:
            return base_forward(self, x)
        if (x.dtype == dtype and residual.dtype == dtype and x.shape == residual.shape and x.shape[-1] == n
                and x.numel() > 0):
            out, s = op(rows(op, x, n), rows(op, residual, n), *params(self))
            return out.reshape(x.shape), s.reshape(x.shape)
        s = x + residual
        return base_forward(self, s), s

    return {"forward": forward}


def _apply_residual_adds(model, k, done, replaced, skipped, probed) -> None:
    feeds = {producer: norm for norm, producer in k.problem.add_from.items()}
    for name, parent in model.named_modules():
        if id(parent) in done:
            continue
        prefix = f"{name}." if name else ""
        norms: dict[str, tuple[nn.Module, Callable]] = {}
        for child_name, child in parent.named_children():
            if (prefix + child_name not in k.problem.modules or prefix + child_name in k.problem.add_from
                    or _takes_residual(_original_class(type(child)).forward)):
                continue  # a norm(x, residual) module takes its add itself (``fused._apply_add_norm``)
            params = _plain_norm_params(child, k.kind, k.dtype, probed, _model_device(model))
            if params is not None:
                norms[child_name] = (child, params)
        target = _ahead_target(model, feeds[name], k, probed, skipped) if name in feeds else None
        if not norms and target is None:
            continue
        cls = type(parent)
        lost = [prefix + c for c in norms] + ([feeds[name]] if target else [])
        if getattr(cls, "_autokernel_residual_adds", False):  # rewritten for another kind already
            skipped.extend((m, f"{k.kind}: {cls.__name__}.forward was rewritten for another add + norm op") for m in lost)
            continue
        forward = cls.forward
        inner = inspect.unwrap(forward)
        rewritten = rewrite_forward(inner, set(norms), ahead=target is not None) \
            if isinstance(inner, types.FunctionType) else None
        new_forward = rewrap(forward, rewritten.forward) if rewritten else None
        if new_forward is None:
            skipped.extend((m, f"{k.kind}: the add feeding it in {cls.__name__}.forward could not be rewritten")
                           for m in lost)
            continue
        for child_name in sorted(set(rewritten.fused)):
            child, params = norms[child_name]
            n = norm_width(child)
            eps = params(child)[-1]
            _swap_class(child, (k.kind, k.identity, "residual-add", n, eps), _add_norm_members(k, n, params, type(child)))
            replaced.append((prefix + child_name, k.kind))
        for child_name in sorted(set(rewritten.deferred)):
            child, params = norms[child_name]
            n = norm_width(child)
            _swap_class(child, (k.kind, k.identity, "ahead", n, params(child)[-1]),
                        _ahead_norm_members(k, n, params, type(child)))
            replaced.append((prefix + child_name, k.kind))
        if target is not None and rewritten.ahead:
            norm, params = target
            n = norm_width(norm)
            _swap_class(norm, (k.kind, k.identity, "ahead", n, params(norm)[-1]),
                        _ahead_norm_members(k, n, params, type(norm)))
            parent.__dict__[NEXT_NORM] = norm
            replaced.append((feeds[name], k.kind))
        elif target is not None:
            skipped.append((feeds[name], f"{k.kind}: {cls.__name__}.forward does not end by returning an add"))
        _swap_class(parent, (k.kind, k.identity, "residual-adds", tuple(sorted(norms)), rewritten.ahead),
                    {"forward": new_forward, "_autokernel_residual_adds": True})
        done.add(id(parent))
