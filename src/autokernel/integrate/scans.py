"""Applier for ``selective_scan``: a Mamba mixer's call of transformers' ``mamba_selective_scan``
goes to the op.

The forward of the module the plan names calls the function by its global name (transformers
5.17's MambaMixer), or calls a function that does (5.25's ``mamba_scan_forward``, a function made
into a module by ``use_kernel_forward_from_hub``).  The class's forward is given its own globals
with ``mamba_selective_scan`` (or that caller, rebound the same way) set to ``scan_replacement``:
the module's function elsewhere in the process is left alone.

The replacement hands a call to the op where it is the problem's: D, z and the dt bias given,
``delta_softplus=True``, no last state asked for, u, delta, Bs, Cs and z in the judged dtype with
A, D and the bias in fp32, the problem's shapes and a state size the op was judged on.  Anything
else (a cache's last state, another dtype, torch.compile tracing with the op handed to inductor)
runs the function itself.  Before a class is switched, the function it would replace is run on a
small probe and must compute the problem's reference: the rewrite finds it by name only.
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable

import torch

from ..recognize import module_wrapped_function
from ..recognize_scan import SCAN_FUNCTION, _shapes_fit
from .calls import _rebound
from .ops import traced_as_original
from .patching import apply_rewritten_members, rewrap
from .selection import KernelOp

PROBE_SHAPE = {"B": 2, "D": 5, "L": 7, "N": 3}


def takes_call(k: KernelOp, a: inspect.BoundArguments) -> bool:
    """Is a bound call of ``mamba_selective_scan`` one the op was judged on?"""
    v = a.arguments
    tensors = [v.get(n) for n in ("hidden_states", "dt", "A", "B", "C", "D", "z", "delta_bias")]
    if (v.get("delta_softplus") is not True or v.get("return_last_state") or v.get("kwargs")
            or not all(isinstance(t, torch.Tensor) for t in tensors) or traced_as_original(k.op)):
        return False
    u, dt, A, B, C, D, z, bias = tensors
    dims = _shapes_fit([tuple(t.shape) for t in tensors])
    return (dims is not None and dims[0] * dims[1] * dims[2] > 0 and dims[3] in k.dims("N")
            and all(t.dtype == k.dtype for t in (u, dt, B, C, z))
            and all(t.dtype == torch.float32 for t in (A, D, bias))
            and len({t.device for t in tensors}) == 1)


def scan_replacement(k: KernelOp, original: Callable[..., Any]) -> Callable[..., Any]:
    """``mamba_selective_scan`` whose calls the op takes go to it, the rest to ``original``."""
    signature = inspect.signature(module_wrapped_function(original))

    def mamba_selective_scan(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        bound.apply_defaults()
        if takes_call(k, bound):
            v = bound.arguments
            return k.op(v["hidden_states"], v["dt"], v["A"], v["B"], v["C"], v["D"], v["z"], v["delta_bias"])
        return original(*args, **kwargs)

    return mamba_selective_scan


def computes_selective_scan(fn: Any, probed: dict) -> bool:
    """Does ``fn``, called as MambaMixer calls ``mamba_selective_scan``, compute the problem's
    reference on a small fp32 probe?"""
    from ..problems import get_problem

    key = (id(fn), "selective_scan probe")
    if key not in probed:
        problem = get_problem("selective_scan")
        u, dt, A, B, C, D, z, bias = problem.make_inputs(dict(PROBE_SHAPE), torch.float32, "cpu", 0)
        try:
            with torch.no_grad():
                got = fn(u, dt, A, B, C, D=D, z=z, delta_bias=bias, delta_softplus=True)
            want = problem.reference(u, dt, A, B, C, D, z, bias)
            probed[key] = (isinstance(got, torch.Tensor) and got.shape == want.shape
                           and torch.allclose(got, want, rtol=1e-4, atol=1e-5))
        except Exception:  # noqa: BLE001 - a look-alike that cannot run on the probe is not Mamba's
            probed[key] = False
    return probed[key]


def _code_names(fn: Any) -> tuple[str, ...]:
    inner = module_wrapped_function(fn)
    return tuple(getattr(getattr(inner, "__code__", None), "co_names", ()))


def rebound_forward(cls: type, k: KernelOp, probed: dict) -> dict[str, Callable] | None:
    """``cls.forward`` with its own globals, in which ``mamba_selective_scan``, or the one function
    it calls by name that calls it, reaches ``scan_replacement``; None where neither is there or the
    function found computes something else."""
    forward = cls.forward
    inner = inspect.unwrap(forward)
    if not isinstance(inner, types.FunctionType):
        return None
    names = inner.__globals__
    if SCAN_FUNCTION in inner.__code__.co_names:
        original = names.get(SCAN_FUNCTION)
        if not computes_selective_scan(original, probed):
            return None
        swapped = {SCAN_FUNCTION: scan_replacement(k, original)}
    else:
        callers = [n for n in inner.__code__.co_names if n in names and SCAN_FUNCTION in _code_names(names[n])]
        if len(callers) != 1:
            return None
        caller = module_wrapped_function(names[callers[0]])
        original = caller.__globals__.get(SCAN_FUNCTION) if isinstance(caller, types.FunctionType) else None
        if original is None or not computes_selective_scan(original, probed):
            return None
        swapped = {callers[0]: _rebound(caller, {SCAN_FUNCTION: scan_replacement(k, original)})}
    new = rewrap(forward, _rebound(inner, swapped))
    return None if new is None else {"forward": new}


def _apply_selective_scan(model, k, done, replaced, skipped, probed) -> None:
    before = len(replaced)
    apply_rewritten_members(model, k, "selective_scan", "selective_scan", lambda k: k,
                            lambda cls, k: rebound_forward(cls, k, probed), probed, replaced)
    placed = {name for name, kind in replaced[before:]}
    for name in sorted(set(k.problem.modules) - placed):
        skipped.append((name, f"selective_scan: its forward calls no {SCAN_FUNCTION} (nor a function that does) "
                              "that computes the problem's reference"))
