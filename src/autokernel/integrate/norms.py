"""Appliers for norms, softmax and the loss: modules switched to the ops."""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn

from .ops import rows
from .patching import (_model_device, _ok_device, _pick, _probe, _probe_input, _reference, _related, _swap_base_forward,
                       _swap_class, dtype_reason)
from .selection import KernelOp


# ------------------------------------------------------------------ norms, softmax, loss
def _norm_eps(module: nn.Module, dtype: torch.dtype) -> float | None:
    for attr in ("variance_epsilon", "eps", "epsilon"):
        if hasattr(module, attr):
            eps = getattr(module, attr)
            if eps is None and isinstance(module, getattr(nn, "RMSNorm", ())):
                return float(torch.finfo(dtype).eps)
            return float(eps) if isinstance(eps, (int, float)) else None
    return None


def _rmsnorm_members(k: KernelOp, n: int, params: Callable[[nn.Module], tuple], base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x, *args, **kwargs):
        if not args and not kwargs and x.dtype == dtype and self.weight.dtype == dtype and x.shape[-1] == n:
            return op(rows(op, x, n), *params(self)).reshape(x.shape)
        return base_forward(self, x, *args, **kwargs)

    return {"forward": forward}


@dataclass(frozen=True)
class RmsnormForm:
    """What an RMSNorm module computes, as the rmsnorm op's arguments: ``x / rms(x) * w``, or
    Gemma's ``x / rms(x) * (1 + w)`` (``offset``: its weights start at zero), which the op gets as
    ``1 + w``, one small add a call."""

    eps: float
    offset: bool

    def params(self, norm: nn.Module) -> tuple:
        return (norm.weight + 1 if self.offset else norm.weight, self.eps)


def rmsnorm_form(m: nn.Module, dtype: torch.dtype, probed: dict) -> RmsnormForm | None:
    """``m``'s form, decided once per class by its own ``forward`` on a probe input; None when
    it is not an RMSNorm the op computes (or its weight is not ``dtype``)."""
    if not _is_rmsnorm(m) or m.weight.dtype != dtype:
        return None
    eps = _norm_eps(m, dtype)
    if eps is None:
        return None
    base = _original_class(type(m))
    key = (base, "rmsnorm form", eps)
    if key not in probed:
        ref = _reference("rmsnorm")
        x = _probe_input(m.weight.shape[0], m, dtype)
        probed[key] = next((RmsnormForm(eps, offset) for offset in (False, True)
                            if _probe(m, base, x, lambda x, offset=offset: ref(x, m.weight + offset, eps))), None)
    return probed[key]


def _original_class(cls: type) -> type:
    """The model's own class under autokernel's generated subclasses."""
    while cls.__name__.startswith("Autokernel") and cls.__bases__:
        cls = cls.__bases__[0]
    return cls


def _is_rmsnorm(module: nn.Module) -> bool:
    """A module that may be an RMSNorm (the probe in ``rmsnorm_form`` decides): ``nn.RMSNorm``,
    or a class named ``*RMSNorm``, or ``*LayerNorm`` other than ``nn.LayerNorm`` (T5LayerNorm
    subtracts no mean), with a 1-D weight."""
    rms = getattr(nn, "RMSNorm", None)
    if rms is not None and isinstance(module, rms):
        return module.weight is not None and len(module.normalized_shape) == 1
    name = type(module).__name__.lower()
    named = "rmsnorm" in name or (name.endswith("layernorm") and not isinstance(module, nn.LayerNorm))
    w = getattr(module, "weight", None)
    return named and isinstance(w, torch.Tensor) and w.dim() == 1


def _apply_rmsnorm(model: nn.Module, k: KernelOp, done: set[int], replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        if id(m) in done or not _is_rmsnorm(m) or not _related(name, k.problem.modules):
            continue
        if _pick([k], "rmsnorm", name) is None:
            continue
        if _norm_eps(m, k.dtype) is None:
            skipped.append((name, "rmsnorm: no eps attribute found"))
            continue
        if m.weight.dtype != k.dtype or not _ok_device(m.weight, _model_device(model)):
            skipped.append((name, dtype_reason("rmsnorm", m.weight.dtype, k.dtype)))
            continue
        form = rmsnorm_form(m, k.dtype, probed)
        if form is None:
            skipped.append((name, f"rmsnorm: {type(m).__name__} computes something else (probe mismatch)"))
            continue
        n = m.weight.shape[0]
        _swap_class(m, ("rmsnorm", k.identity, n, form), _rmsnorm_members(k, n, form.params, type(m)))
        done.add(id(m))
        replaced.append((name, "rmsnorm"))


ZERO_BIAS = "_autokernel_zero_bias"  # the bias a LayerNorm without one gets the op (a buffer, set once)
UNIT_WEIGHT = "_autokernel_unit_weight"  # the weight a LayerNorm without one gets the op (a buffer, set once)
# eps values tried, in this order, on a LayerNorm without an eps attribute (OLMo's writes 1e-5 in its forward)
PROBED_EPS = (1e-5, 1e-6, 1e-12, 1e-8)


@dataclass(frozen=True)
class LayernormForm:
    """A LayerNorm module as the layernorm op's arguments: its weight, or ones for one without
    (``nn.LayerNorm(elementwise_affine=False)``, OLMo's ``OlmoLayerNorm``), its bias, or zeros for
    one without (``nn.LayerNorm(bias=False)``, Cohere's ``CohereLayerNorm``), and eps.  ``offset``:
    the norm scales by ``1 + w`` (Nemotron's ``NemotronLayerNorm1P``, whose weights are stored
    zero-centred), which the op gets as ``w + 1``, one small add a call (as Gemma's RMSNorm)."""

    eps: float
    bias: bool
    weight: bool = True
    offset: bool = False

    def prepare(self, norm: nn.Module, dtype: torch.dtype, device: torch.device) -> None:
        """Give a norm without weight or bias its ones and zeros (once, before the op's first call)."""
        n = norm_width(norm)
        if not self.weight and UNIT_WEIGHT not in norm._buffers:
            norm.register_buffer(UNIT_WEIGHT, torch.ones(n, dtype=dtype, device=device), persistent=False)
        if not self.bias and ZERO_BIAS not in norm._buffers:
            like = norm.weight.detach() if self.weight else norm._buffers[UNIT_WEIGHT]
            norm.register_buffer(ZERO_BIAS, torch.zeros_like(like), persistent=False)

    def params(self, norm: nn.Module) -> tuple:
        weight = norm.weight if self.weight else norm._buffers[UNIT_WEIGHT]
        return (weight + 1 if self.offset else weight, norm.bias if self.bias else norm._buffers[ZERO_BIAS], self.eps)


def norm_width(m: nn.Module) -> int | None:
    """The size of the last dimension a norm module normalises: its weight's, or, for one without
    a weight, its 1-D ``normalized_shape``'s."""
    w = getattr(m, "weight", None)
    if isinstance(w, torch.Tensor):
        return w.shape[0] if w.dim() == 1 else None
    shape = getattr(m, "normalized_shape", None)
    shape = (shape,) if isinstance(shape, int) else shape
    return int(shape[0]) if isinstance(shape, (tuple, list)) and len(shape) == 1 and isinstance(shape[0], int) else None


def layernorm_form(m: nn.Module, dtype: torch.dtype, probed: dict) -> LayernormForm | None:
    """``m`` as the layernorm op computes it, or None: ``nn.LayerNorm`` over the last dim (as it
    is), or a class named ``*LayerNorm`` with a 1-D weight, or none and a 1-D ``normalized_shape``,
    whose own ``forward`` matches the reference on a probe (decided once per class), or an
    ``nn.LayerNorm`` subclass with a one-input forward of its own that does not call
    ``super().forward`` and matches the reference with ``w`` or ``1 + w`` (``own_forward_form``)."""
    w = getattr(m, "weight", None)
    if w is None:
        return _weightless_layernorm_form(m, probed)
    if not isinstance(w, torch.Tensor) or w.dim() != 1 or w.dtype != dtype:
        return None
    bias = getattr(m, "bias", None)
    base = _original_class(type(m))
    if isinstance(m, nn.LayerNorm) and base.forward is nn.LayerNorm.forward:
        return LayernormForm(float(m.eps), bias is not None) if len(m.normalized_shape) == 1 else None
    if isinstance(m, nn.LayerNorm):
        return own_forward_form(m, base, dtype, probed)
    if not base.__name__.lower().endswith("layernorm"):
        return None
    eps = _norm_eps(m, dtype)
    if eps is None or (bias is not None and (not isinstance(bias, torch.Tensor) or bias.shape != w.shape)):
        return None
    key = (base, "layernorm form", eps)
    if key not in probed:
        ref = _reference("layernorm")
        x = _probe_input(w.shape[0], m, dtype)
        probed[key] = LayernormForm(eps, bias is not None) if _probe(
            m, base, x, lambda x: ref(x, m.weight, m.bias if bias is not None else torch.zeros_like(m.weight), eps)) else None
    return probed[key]


def own_forward_form(m: nn.LayerNorm, base: type, dtype: torch.dtype, probed: dict) -> LayernormForm | None:
    """An ``nn.LayerNorm`` subclass with a forward of its own (Nemotron's ``NemotronLayerNorm1P``:
    ``F.layer_norm(x, shape, self.weight + 1, self.bias, self.eps)``) as the op's arguments, by a
    probe of the forward against the reference with ``w``, then ``1 + w`` (decided once per class).
    None for a forward that takes a residual (the add_layernorm appliers' ``norm(x, residual)``),
    that calls ``super().forward`` (ConvNeXt's: ``calls_super_forward``), or that raises."""
    if (len(m.normalized_shape) != 1 or m.weight is None or calls_super_forward(base)
            or _takes_residual(base.forward)):
        return None
    eps, bias = float(m.eps), m.bias is not None
    key = (base, "own layernorm form", eps, bias)
    if key not in probed:
        ref = _reference("layernorm")
        x = _probe_input(m.weight.shape[0], m, dtype)
        b = m.bias if bias else torch.zeros_like(m.weight)
        found = None
        for offset in (False, True):
            try:
                ok = _probe(m, base, x, lambda x, offset=offset: ref(x, m.weight + offset, b, eps))
            except Exception:  # a forward that does not take one tensor is not this norm
                break
            if ok:
                found = LayernormForm(eps, bias, offset=offset)
                break
        probed[key] = found
    return probed[key]


def _takes_residual(forward: Callable) -> bool:
    """Does a norm's forward take a second tensor (``forward(x, residual)``)?"""
    try:
        params = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 3


def _weightless_layernorm_form(m: nn.Module, probed: dict) -> LayernormForm | None:
    """A LayerNorm without weight or bias: ``nn.LayerNorm(elementwise_affine=False)`` as it is; a
    class named ``*LayerNorm`` by a probe in fp32 (its eps, where it has no eps attribute, among
    ``PROBED_EPS``: the probe's low-variance rows tell them apart)."""
    if any(p is not None for p in m._parameters.values()) or norm_width(m) is None:
        return None
    base = _original_class(type(m))
    if isinstance(m, nn.LayerNorm):
        return LayernormForm(float(m.eps), False, False) if base.forward is nn.LayerNorm.forward else None
    if not base.__name__.lower().endswith("layernorm"):
        return None
    eps = _norm_eps(m, torch.float32)
    key = (base, "weightless layernorm form", eps, norm_width(m))
    if key not in probed:
        ref = _reference("layernorm")
        x = _probe_input(norm_width(m), m, torch.float32)
        ones, zeros = torch.ones_like(x[0]), torch.zeros_like(x[0])
        probed[key] = next((LayernormForm(e, False, False) for e in ((eps,) if eps is not None else PROBED_EPS)
                            if all(_probe(m, base, rows, lambda rows, e=e: ref(rows, ones, zeros, e))
                                   for rows in (x, x * 1e-3))), None)
    return probed[key]


def _layernorm_members(k: KernelOp, n: int, form: LayernormForm, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x, *args, **kwargs):
        if not args and not kwargs and x.dtype == dtype and x.shape[-1] == n:
            return op(rows(op, x, n), *form.params(self)).reshape(x.shape)
        return base_forward(self, x, *args, **kwargs)

    return {"forward": forward}


def calls_super_forward(cls: type) -> bool:
    """Does ``cls``, a subclass of a torch module with a forward of its own, call
    ``super().forward`` in it (ConvNeXt's LayerNorm, on its permuted channels-first input; the
    learned position embeddings of OPT, BART and BioGPT, on ids at an offset)?"""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (OSError, TypeError, SyntaxError):
        return False
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "forward"
               and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
               and node.func.value.func.id == "super" for node in ast.walk(tree))


def _inherited_layernorm_form(m: nn.Module, dtype: torch.dtype) -> LayernormForm | None:
    """The op's form of ``nn.LayerNorm.forward`` itself, which a subclass calls: by its attributes."""
    if len(m.normalized_shape) != 1 or (m.weight is not None and m.weight.dtype != dtype):
        return None
    return LayernormForm(float(m.eps), m.bias is not None, m.weight is not None)


def _inherited_layernorm_members(k: KernelOp, n: int, form: LayernormForm) -> dict[str, Any]:
    """A class between the subclass and ``nn.LayerNorm`` whose forward is the op: the subclass's
    ``super().forward`` reaches it, and everything the subclass does around that call stays."""
    op, dtype = k.op, k.dtype

    def forward(self, x):
        if x.dtype == dtype and x.shape[-1] == n:
            return op(rows(op, x, n), *form.params(self)).reshape(x.shape)
        return nn.LayerNorm.forward(self, x)

    return {"forward": forward}


def _apply_layernorm(model, k, done, replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        plain = isinstance(m, nn.LayerNorm) and type(m).forward is nn.LayerNorm.forward
        named = (not isinstance(m, nn.LayerNorm) and type(m).__name__.lower().endswith("layernorm")
                 and _related(name, k.problem.modules))
        inherits = isinstance(m, nn.LayerNorm) and not plain and calls_super_forward(_original_class(type(m)))
        own = isinstance(m, nn.LayerNorm) and not plain and not inherits and _related(name, k.problem.modules)
        if id(m) in done or not (plain or named or inherits or own) or _pick([k], "layernorm", name) is None:
            continue
        if inherits:
            form = _inherited_layernorm_form(m, k.dtype)
            if form is None:
                skipped.append((name, f"layernorm: needs a 1-D normalized shape and a {k.dtype} weight"))
                continue
            n = norm_width(m)
            form.prepare(m, k.dtype, _model_device(model))
            _swap_base_forward(m, ("layernorm", k.identity, n, form), nn.LayerNorm,
                               _inherited_layernorm_members(k, n, form))
            done.add(id(m))
            replaced.append((name, "layernorm"))
            continue
        form = layernorm_form(m, k.dtype, probed)
        if form is None:
            if plain and len(m.normalized_shape) != 1:
                skipped.append((name, "layernorm: needs a 1-D normalized shape"))
            elif getattr(m, "weight", None) is not None and m.weight.dtype != k.dtype:
                skipped.append((name, dtype_reason("layernorm", m.weight.dtype, k.dtype)))
            elif not plain:
                skipped.append((name, f"layernorm: {type(m).__name__} computes something else (probe mismatch)"))
            continue
        n = norm_width(m)
        form.prepare(m, k.dtype, _model_device(model))
        _swap_class(m, ("layernorm", k.identity, n, form), _layernorm_members(k, n, form, type(m)))
        done.add(id(m))
        replaced.append((name, "layernorm"))


def _apply_softmax(model, k, done, replaced, skipped, probed) -> None:
    op, dtype = k.op, k.dtype

    def forward(self, x):
        if x.dtype == dtype and x.dim() >= 1 and x.numel() > 0:
            return op(rows(op, x, x.shape[-1])).reshape(x.shape)
        return nn.Softmax.forward(self, x)

    for name, m in model.named_modules():
        if id(m) in done or type(m).forward is not nn.Softmax.forward or _pick([k], "softmax", name) is None:
            continue
        if m.dim not in (-1,):
            skipped.append((name, f"softmax: dim={m.dim}; the kernel reduces the last dim (dim=-1)"))
            continue
        _swap_class(m, ("softmax", k.identity), {"forward": forward})
        done.add(id(m))
        replaced.append((name, "softmax"))


def _apply_cross_entropy(model, k, done, replaced, skipped, probed) -> None:
    op, dtype = k.op, k.dtype

    def forward(self, logits, targets):
        if (logits.dim() == 2 and logits.dtype == dtype and targets.dim() == 1
                and targets.dtype == torch.long and targets.shape[0] == logits.shape[0]):
            return op(logits, targets)
        return nn.CrossEntropyLoss.forward(self, logits, targets)

    for name, m in model.named_modules():
        if (id(m) in done or type(m).forward is not nn.CrossEntropyLoss.forward
                or _pick([k], "cross_entropy", name) is None):
            continue
        if (m.reduction != "mean" or m.ignore_index != -100 or m.weight is not None
                or getattr(m, "label_smoothing", 0.0) != 0.0):
            skipped.append((name, "cross_entropy: only mean reduction, ignore_index=-100, no weight or smoothing"))
            continue
        _swap_class(m, ("cross_entropy", k.identity), {"forward": forward})
        done.add(id(m))
        replaced.append((name, "cross_entropy"))
