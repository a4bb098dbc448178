"""Helpers shared by the appliers: which plan entry a module belongs to, the class swap, and
the probe that checks a module computes what the problem's reference computes."""
from __future__ import annotations

import types
from typing import Any, Callable

import torch
import torch.nn as nn

from .class_cache import _code_names, kept_class
from .selection import KernelOp


# ------------------------------------------------------------------ module helpers
def _related(module_name: str, plan_modules: list[str]) -> bool:
    """Is ``module_name`` one of the plan's modules, inside one, or around one?"""
    if not plan_modules:
        return True
    for p in plan_modules:
        if (module_name == p or module_name.startswith(p + ".") or p.startswith(module_name + ".")
                or (module_name and p.endswith("." + module_name))):
            return True
    return False


def _pick(kops: list[KernelOp], kind: str, module_name: str) -> KernelOp | None:
    """The op of ``kind`` whose plan entry names ``module_name`` (exact before related)."""
    same = [k for k in kops if k.kind == kind]
    for k in same:
        if module_name in k.problem.modules:
            return k
    if not module_name:  # the model itself: the profiler records its own forward's share under ""
        return next((k for k in same if "" in k.problem.module_time_us or not k.problem.modules), None)
    for k in same:
        if _related(module_name, k.problem.modules):
            return k
    return None


def _model_device(model: nn.Module) -> torch.device:
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    return torch.device("cpu")


def _swap_class(module: nn.Module, key: tuple, members: dict[str, Any]) -> None:
    base = type(module)
    module.__class__ = kept_class((base,) + key, members, lambda: type(
        f"Autokernel{base.__name__}", (base,), dict(members, __module__=base.__module__)))


def _swap_base_forward(module: nn.Module, key: tuple, under: type, members: dict[str, Any]) -> None:
    """Give ``module`` a class whose MRO puts ``members`` (a forward) between its own class and
    ``under``, a base its class inherits from: the class's own forward runs as it is, and its
    ``super().forward`` reaches ``members``'s."""
    base = type(module)

    def make() -> type:
        between = type(f"Autokernel{under.__name__}", (under,), dict(members, __module__=base.__module__))
        return type(f"Autokernel{base.__name__}", (base, between), {"__module__": base.__module__})

    module.__class__ = kept_class((base, under) + key, members, make)


def _rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


PROBE_TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def _probe(module: nn.Module, base: type, x: torch.Tensor, expected: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Does the module's original ``forward`` compute what the problem's PyTorch reference
    computes (``expected``) on ``x``?  The kernel itself is not run here: whether it is right
    is for ``verify`` to show."""
    with torch.no_grad():
        ref = base.forward(module, x)
        want = expected(x)
    if not isinstance(ref, torch.Tensor) or ref.shape != want.shape:
        return False
    return _rel_error(want, ref) <= PROBE_TOLERANCE.get(x.dtype, 1e-4)


def _reference(kind: str) -> Callable[..., Any]:
    from ..problems import get_problem

    return get_problem(kind).reference


def _probe_input(n: int, module: nn.Module, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(1234)
    return torch.randn(3, n, generator=gen).to(device=_model_device(module), dtype=dtype)


def dtype_reason(kind: str, weight_dtype: torch.dtype, kernel_dtype: torch.dtype) -> str:
    """Why a module whose weight is in another dtype than the run's kernel is skipped."""
    return f"{kind}: weight dtype {weight_dtype} is not the kernel's {kernel_dtype}"


def _ok_device(t: torch.Tensor, device: torch.device) -> bool:
    return t.device.type == device.type


def _check_probe(base: type, m: nn.Module, k: KernelOp, probed: dict, x: torch.Tensor,
                 expected: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    key = (base, k.kind)
    if key not in probed:
        probed[key] = _probe(m, base, x, expected)
    return probed[key]



def _class_code_names(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            break
        for fn in vars(klass).values():
            if isinstance(fn, types.FunctionType):
                names |= _code_names(fn.__code__)
    return names


def rewrap(wrapper: Any, inner: types.FunctionType) -> Any:
    """``wrapper`` (a chain of ``functools.wraps`` decorators around a function) rebuilt around
    ``inner`` instead of the function it wraps; None when a wrapper does not hold the function
    it wraps in a closure cell."""
    wrapped = getattr(wrapper, "__wrapped__", None)
    if wrapped is None:
        return inner
    if not isinstance(wrapper, types.FunctionType) or not wrapper.__closure__:
        return None
    new_inner = rewrap(wrapped, inner)
    if new_inner is None:
        return None
    cells = list(wrapper.__closure__)
    hits = [i for i, c in enumerate(cells) if c.cell_contents is wrapped]
    if len(hits) != 1:
        return None
    cells[hits[0]] = types.CellType(new_inner)
    new = types.FunctionType(wrapper.__code__, wrapper.__globals__, wrapper.__name__, wrapper.__defaults__,
                             tuple(cells))
    new.__kwdefaults__, new.__qualname__ = wrapper.__kwdefaults__, wrapper.__qualname__
    new.__dict__.update(wrapper.__dict__)
    new.__wrapped__ = new_inner
    return new


def apply_rewritten_members(model: nn.Module, k: KernelOp, kind: str, label: str,
                            make_helpers: Callable[[KernelOp], Any],
                            rewrite: Callable[[type, Any], dict[str, Callable] | None], probed: dict,
                            replaced: list[tuple[str, str]]) -> None:
    """Switch each module of ``model`` that ``k`` is for to the methods ``rewrite(cls, helpers)``
    rewrote from its class's source (its forward, or methods the forward calls; None: left
    alone), one rewrite per class; ``make_helpers(k)`` makes what the rewritten methods call, once."""
    helpers = None
    for name, m in model.named_modules():
        if _pick([k], kind, name) is None:
            continue
        key = (type(m), f"{label} rewrite", k.opname)
        if key not in probed:
            helpers = helpers or make_helpers(k)
            probed[key] = rewrite(type(m), helpers)
        if probed[key] is None:
            continue
        _swap_class(m, (label, k.identity), probed[key])
        replaced.append((name, kind))


def apply_rewritten_forwards(model: nn.Module, k: KernelOp, kind: str, label: str,
                             make_helpers: Callable[[KernelOp], Any],
                             rewrite: Callable[[Callable, Any], Callable | None], probed: dict,
                             replaced: list[tuple[str, str]]) -> None:
    """Switch each module of ``model`` that ``k`` is for to its forward's source rewritten by
    ``rewrite(forward, helpers)`` (None: left alone), one rewrite per class; ``make_helpers(k)``
    makes what the rewritten forwards call, once."""
    def members(cls: type, helpers: Any) -> dict[str, Callable] | None:
        forward = rewrite(cls.forward, helpers)
        return None if forward is None else {"forward": forward}

    apply_rewritten_members(model, k, kind, label, make_helpers, members, probed, replaced)
