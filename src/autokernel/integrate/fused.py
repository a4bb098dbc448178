"""Appliers for the fused kinds: residual add + norm, GELU activation modules, GEGLU MLPs and
packed SwiGLU MLPs (Phi-3's ``gate_up_proj``).

* ``add_rmsnorm`` / ``add_layernorm`` — norm modules whose ``forward(x, residual)`` returns
  ``(norm(x + residual), x + residual)`` (the residual pattern of ``examples/``, as vLLM
  writes its norms); a call without the residual runs what was there before (the plain norm
  op, when that was applied too).
* ``gelu`` — GELU activation modules (``nn.GELU``, transformers' ``GELUActivation``,
  ``NewGELUActivation``...); ``F.gelu`` calls inside methods are rebound in ``calls``.
* ``geglu`` — MLPs with gate/up/down linears and a GELU; ``swiglu_packed`` / ``geglu_packed`` —
  MLPs with one packed linear (D -> 2H: Phi-3's ``gate_up_proj``, ModernBERT's ``Wi``), a down
  linear H -> D and a SiLU / a GELU on the first half.

Every class is probed first: its original ``forward`` on a small random input must match the
problem's reference, or the module is left alone.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn

from ..recognize import gelu_form, is_silu_module, packed_mlp_parts, residual_norm_parts
from .linears import _DOWN_NAMES, _GATE_NAMES, _UP_NAMES, _find_linear
from .ops import rows
from .norms import LayernormForm, _is_rmsnorm, _original_class, _takes_residual, layernorm_form, norm_width, rmsnorm_form
from .patching import (PROBE_TOLERANCE, _class_code_names, _model_device, _pick, _probe_input, _reference, _rel_error,
                       _swap_class)
from .selection import KernelOp


def _probe_matches(got: Any, want: Any, dtype: torch.dtype) -> bool:
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape:
            return False
        if _rel_error(w, g) > PROBE_TOLERANCE.get(dtype, 1e-4):
            return False
    return True


def _probe_call(probed: dict, key: tuple, run: Callable[[], Any], expected: Callable[[], Any], dtype: torch.dtype) -> bool:
    if key not in probed:
        try:
            with torch.no_grad():
                probed[key] = _probe_matches(run(), expected(), dtype)
        except Exception:  # a forward that does not take these arguments is not this kind
            probed[key] = False
    return probed[key]


# ------------------------------------------------------------------ residual add + norm
def _add_norm_members(k: KernelOp, n: int, params: Callable[[nn.Module], tuple], base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x, residual=None, *args, **kwargs):
        if (residual is not None and not args and not kwargs and x.dtype == dtype and residual.dtype == dtype
                and x.shape == residual.shape and x.shape[-1] == n and x.numel() > 0):
            out, s = op(rows(op, x, n), rows(op, residual, n), *params(self))
            return out.reshape(x.shape), s.reshape(x.shape)
        return base_forward(self, x, residual, *args, **kwargs)

    return {"forward": forward}


def _apply_add_norm(model, k, done, replaced, skipped, probed) -> None:
    rms = k.kind == "add_rmsnorm"
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], k.kind, name) is None:
            continue
        if rms:
            if not _is_rmsnorm(m):
                continue
            form = rmsnorm_form(m, k.dtype, probed)
            ok_params = form is not None
            params = form.params if form is not None else None
            expected = (lambda x, r, m=m, params=params: _reference("add_rmsnorm")(x, r, *params(m)))
        else:
            if not isinstance(m, nn.LayerNorm) or type(m).forward is nn.LayerNorm.forward:
                continue  # a plain LayerNorm takes no residual
            ok_params = len(m.normalized_shape) == 1 and m.weight is not None
            form = LayernormForm(float(m.eps), m.bias is not None) if ok_params else None
            if form is not None:
                form.prepare(m, k.dtype, _model_device(model))
            params = form.params if form is not None else None
            expected = (lambda x, r, m=m, params=params: _reference("add_layernorm")(x, r, *params(m)))
        if not ok_params or m.weight.dtype != k.dtype:
            skipped.append((name, f"{k.kind}: needs a {k.dtype} weight (and eps / bias)"))
            continue
        n = m.weight.shape[0]
        base = type(m)
        if not _takes_residual(_original_class(base).forward):
            continue  # a plain norm: the add before it is fused where it is written (``residuals``)
        x = _probe_input(n, m, k.dtype)
        r = _probe_input(n, m, k.dtype).flip(0)
        if not _probe_call(probed, (base, k.kind), lambda: base.forward(m, x, r), lambda: expected(x, r), k.dtype):
            skipped.append((name, f"{k.kind}: {base.__name__}.forward(x, residual) computes something else (probe mismatch)"))
            continue
        _swap_class(m, (k.kind, k.identity, n), _add_norm_members(k, n, params, base))
        done.add(id(m))
        replaced.append((name, k.kind))


def _apply_residual_outputs(model, k, done, replaced, skipped, probed) -> None:
    """Post-norm output blocks, ``norm(dropout(linear(h)) + residual)`` (BERT, ViT...): the
    add and the norm become the op (its sum output is not used)."""
    op, dtype = k.op, k.dtype
    for name, m in model.named_modules():
        parts = residual_norm_parts(m)
        if id(m) in done or parts is None or parts[0] != k.kind or _pick([k], k.kind, name) is None:
            continue
        _, lin_name, norm_name = parts
        lin, norm = getattr(m, lin_name), getattr(m, norm_name)
        if k.kind == "add_layernorm":
            form = layernorm_form(norm, dtype, probed)
            ok = form is not None
            if form is not None:
                form.prepare(norm, dtype, _model_device(model))
            params = form.params if form is not None else None
        else:
            form = rmsnorm_form(norm, dtype, probed) if getattr(norm, "weight", None) is not None else None
            ok = form is not None
            params = form.params if form is not None else None
        if not ok or lin.weight.dtype != dtype or params(norm)[0].dtype != dtype:
            skipped.append((name, f"{k.kind}: needs {dtype} weights (and eps / bias)"))
            continue
        n = norm_width(norm)
        base = type(m)
        base_forward = base.forward
        h = _probe_input(lin.in_features, m, dtype)
        r = _probe_input(n, m, dtype).flip(0)
        ref = _reference(k.kind)
        if not _probe_call(probed, (base, k.kind, "residual-output"), lambda: base_forward(m, h, r),
                           lambda: ref(lin(h), r, *params(norm))[0], dtype):
            skipped.append((name, f"{k.kind}: {base.__name__} computes something else (probe mismatch)"))
            continue

        def forward(self, hidden, residual, *args, base_forward=base_forward, lin_name=lin_name,
                    norm_name=norm_name, params=params, n=n, **kwargs):
            if (not args and not kwargs and hidden.dtype == dtype and residual.dtype == dtype and residual.shape[-1] == n
                    and residual.numel() > 0):
                x = getattr(self, lin_name)(hidden)
                if x.shape == residual.shape:
                    out, _ = op(rows(op, x, n), rows(op, residual, n), *params(getattr(self, norm_name)))
                    return out.reshape(residual.shape)
            return base_forward(self, hidden, residual, *args, **kwargs)

        _swap_class(m, (k.kind, k.identity, "residual-output", lin_name, norm_name), {"forward": forward})
        done.add(id(m))
        replaced.append((name, k.kind))


# ------------------------------------------------------------------ GELU modules
def _apply_gelu_modules(model, k, done, replaced, skipped, probed) -> None:
    op, dtype = k.op, k.dtype
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], "gelu", name) is None:
            continue
        tanh = gelu_form(m)
        if tanh is None:
            continue
        base = type(m)
        base_forward = base.forward
        x = _probe_input(64, m, dtype) * 3
        if not _probe_call(probed, (base, "gelu", tanh), lambda: base_forward(m, x),
                           lambda: _reference("gelu")(x, tanh), dtype):
            skipped.append((name, f"gelu: {base.__name__} computes something else (probe mismatch)"))
            continue

        def forward(self, x, *args, tanh=tanh, base_forward=base_forward, **kwargs):
            if not args and not kwargs and x.dtype == dtype and x.dim() >= 1 and x.numel() > 0:
                return op(rows(op, x, x.shape[-1]), tanh).reshape(x.shape)
            return base_forward(self, x, *args, **kwargs)

        _swap_class(m, ("gelu", k.identity, tanh), {"forward": forward})
        done.add(id(m))
        replaced.append((name, "gelu"))


# ------------------------------------------------------------------ GEGLU and packed SwiGLU MLPs
def _geglu_parts(m: nn.Module) -> tuple[tuple[str, str, str], bool] | None:
    if isinstance(m, nn.Linear):
        return None
    g, u, d = _find_linear(m, _GATE_NAMES), _find_linear(m, _UP_NAMES), _find_linear(m, _DOWN_NAMES)
    if not (g and u and d) or len({g, u, d}) != 3:
        return None
    forms = [gelu_form(c) for c in m.children()]
    forms = [f for f in forms if f is not None]
    if forms:
        return (g, u, d), forms[0]
    return None


def _apply_geglu(model, k, done, replaced, skipped, probed) -> None:
    op, dtype = k.op, k.dtype
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], "geglu", name) is None:
            continue
        found = _geglu_parts(m)
        if found is None:
            continue
        (g, u, d), tanh = found
        lins = [getattr(m, p) for p in (g, u, d)]
        if any(lin.weight.dtype != dtype for lin in lins):
            skipped.append((name, f"geglu: linear weights are not {dtype}"))
            continue
        d_in = lins[0].in_features
        base = type(m)
        base_forward = base.forward
        x = _probe_input(d_in, m, dtype)
        ref = _reference("geglu")
        if not _probe_call(probed, (base, "geglu"), lambda: base_forward(m, x),
                           lambda: lins[2](ref(lins[0](x), lins[1](x), tanh)), dtype):
            skipped.append((name, f"geglu: {base.__name__} computes something else (probe mismatch)"))
            continue

        def forward(self, x, *args, base_forward=base_forward, tanh=tanh, parts=(g, u, d), d_in=d_in, **kwargs):
            if not args and not kwargs and x.dtype == dtype and x.shape[-1] == d_in and x.numel() > 0:
                x2 = rows(op, x, d_in)
                out = getattr(self, parts[2])(op(getattr(self, parts[0])(x2), getattr(self, parts[1])(x2), tanh))
                return out.reshape(*x.shape[:-1], out.shape[-1])
            return base_forward(self, x, *args, **kwargs)

        _swap_class(m, ("geglu", k.identity, (g, u, d), tanh), {"forward": forward})
        done.add(id(m))
        replaced.append((name, "geglu"))


def _packed_form(m: nn.Module, kind: str, k: KernelOp) -> tuple[bool, ...] | None:
    """What the packed MLP ``m`` must show to be ``kind``: () for ``swiglu_packed`` (a SiLU in
    its code or a SiLU module), (tanh,) for ``geglu_packed`` (the form of its GELU child, else,
    where its code calls a gelu itself, the form the plan's shapes name: one, or none is taken);
    None where it shows neither."""
    if kind == "swiglu_packed":
        silu = "silu" in _class_code_names(type(m)) or any(is_silu_module(c) for c in m.modules())
        return () if silu else None
    forms = {f for f in (gelu_form(c) for c in m.modules()) if f is not None}
    if not forms and "gelu" in _class_code_names(type(m)):
        forms = {bool(t) for t in k.dims("tanh")}
    return (forms.pop(),) if len(forms) == 1 else None


def _apply_packed_glu(model, k, done, replaced, skipped, probed) -> None:
    """``swiglu_packed`` and ``geglu_packed``: an MLP with one packed linear D -> 2H (its name
    does not matter: ``packed_mlp_parts`` finds it by the shapes) and a down linear H -> D,
    probed against ``down(reference(packed(x), *form))`` before its forward is switched."""
    op, dtype, kind = k.op, k.dtype, k.kind
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], kind, name) is None:
            continue
        parts = packed_mlp_parts(m)
        if parts is None:
            continue
        form = _packed_form(m, kind, k)
        if form is None:
            continue
        gu_name, down_name, d_in, _ = parts
        linears = {gu_name: getattr(m, gu_name), down_name: getattr(m, down_name)}
        if any(lin.weight.dtype != dtype for lin in linears.values()):
            skipped.append((name, f"{kind}: linear weights are not {dtype}"))
            continue
        base = type(m)
        base_forward = base.forward
        x = _probe_input(d_in, m, dtype)
        ref = _reference(kind)
        if not _probe_call(probed, (base, kind, form), lambda: base_forward(m, x),
                           lambda: linears[down_name](ref(linears[gu_name](x), *form)), dtype):
            skipped.append((name, f"{kind}: {base.__name__} computes something else (probe mismatch)"))
            continue

        def forward(self, x, *args, base_forward=base_forward, gu=gu_name, down=down_name, d_in=d_in, form=form,
                    **kwargs):
            if not args and not kwargs and x.dtype == dtype and x.shape[-1] == d_in and x.numel() > 0:
                out = getattr(self, down)(op(getattr(self, gu)(x.reshape(-1, d_in)), *form))
                return out.reshape(*x.shape[:-1], out.shape[-1])
            return base_forward(self, x, *args, **kwargs)

        _swap_class(m, (kind, k.identity, gu_name, down_name, form), {"forward": forward})
        done.add(id(m))
        replaced.append((name, kind))
