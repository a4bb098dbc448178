"""Appliers for ``selective_scan`` and ``causal_conv1d``: a Mamba mixer's calls of transformers'
``mamba_selective_scan`` and ``causal_conv1d_fn`` go to the ops.

The forward of the module the plan names calls the function by its global name (transformers
5.17's MambaMixer), or calls a function that does (5.25's ``mamba_scan_forward`` and
``causal_conv1d_forward``, functions made into modules by ``use_kernel_forward_from_hub``).  The
class's forward is given its own globals with the function (or that caller, rebound the same way)
set to a replacement: the function elsewhere in the process is left alone.  The second applier
rebinds the forward the first left, so one mixer takes both.

A replacement hands a call to the op where it is the problem's, and runs the function itself
otherwise (torch.compile tracing with the op handed to inductor included):

* the scan: D, z and the dt bias given, ``delta_softplus=True``, no last state asked for (a
  cache's), u, delta, Bs, Cs and z in the judged dtype with A, D and the bias in fp32, the
  problem's shapes and a state size the op was judged on;
* the convolution: a bias given, activation silu or none (as judged), x, weight and bias in the
  judged dtype, a kernel size the op was judged on.

Before a class is switched, the function it would replace is run on a small probe and must
compute the problem's reference: the rewrite finds it by name only.
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable

import torch

from ..recognize import module_wrapped_function
from ..recognize_scan import CONV_FUNCTION, SCAN_FUNCTION, conv_shapes_fit, scan_shapes_fit
from .calls import _rebound
from .ops import traced_as_original
from .patching import apply_rewritten_members, rewrap
from .selection import KernelOp

PROBE_SHAPES = {"selective_scan": {"B": 2, "D": 5, "L": 7, "N": 3},
                "causal_conv1d": {"B": 2, "D": 5, "L": 7, "K": 4, "silu": 1}}
SILU_NAMES = ("silu", "swish")


def takes_scan(k: KernelOp, v: dict[str, Any]) -> bool:
    """Is a call of ``mamba_selective_scan`` (its bound arguments ``v``) one the op was judged on?"""
    tensors = [v.get(n) for n in ("hidden_states", "dt", "A", "B", "C", "D", "z", "delta_bias")]
    if (v.get("delta_softplus") is not True or v.get("return_last_state") or v.get("kwargs")
            or not all(isinstance(t, torch.Tensor) for t in tensors)):
        return False
    u, dt, A, B, C, D, z, bias = tensors
    dims = scan_shapes_fit([tuple(t.shape) for t in tensors])
    return (dims is not None and dims[0] * dims[1] * dims[2] > 0 and dims[3] in k.dims("N")
            and all(t.dtype == k.dtype for t in (u, dt, B, C, z))
            and all(t.dtype == torch.float32 for t in (A, D, bias))
            and len({t.device for t in tensors}) == 1)


def scan_args(v: dict[str, Any]) -> tuple:
    return v["hidden_states"], v["dt"], v["A"], v["B"], v["C"], v["D"], v["z"], v["delta_bias"]


def _silu(activation: Any) -> int | None:
    return 1 if activation in SILU_NAMES else 0 if activation is None else None


def takes_conv(k: KernelOp, v: dict[str, Any]) -> bool:
    """Is a call of ``causal_conv1d_fn`` (its bound arguments ``v``) one the op was judged on?"""
    tensors = [v.get(n) for n in ("hidden_states", "weight", "bias")]
    if v.get("kwargs") or not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    dims = conv_shapes_fit([tuple(t.shape) for t in tensors])
    silu = _silu(v.get("activation"))
    return (dims is not None and dims[0] * dims[1] * dims[2] > 0 and dims[3] in k.dims("K")
            and silu is not None and silu in k.dims("silu")
            and all(t.dtype == k.dtype for t in tensors) and len({t.device for t in tensors}) == 1)


def conv_args(v: dict[str, Any]) -> tuple:
    return v["hidden_states"], v["weight"], v["bias"], _silu(v["activation"])


# kind -> (the function it replaces, does the op take a call, the op's arguments from the call)
FUNCTIONS: dict[str, tuple[str, Callable[[KernelOp, dict], bool], Callable[[dict], tuple]]] = {
    "selective_scan": (SCAN_FUNCTION, takes_scan, scan_args),
    "causal_conv1d": (CONV_FUNCTION, takes_conv, conv_args),
}


def replacement(k: KernelOp, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` whose calls ``k``'s op takes go to it, the rest to ``original``."""
    _, takes, op_args = FUNCTIONS[k.kind]
    signature = inspect.signature(module_wrapped_function(original))

    def replaced(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        bound.apply_defaults()
        if not traced_as_original(k.op) and takes(k, bound.arguments):
            return k.op(*op_args(bound.arguments))
        return original(*args, **kwargs)

    replaced.__name__ = replaced.__qualname__ = FUNCTIONS[k.kind][0]
    return replaced


def _probe_call(kind: str, fn: Any, args: tuple) -> Any:
    if kind == "selective_scan":
        u, dt, A, B, C, D, z, bias = args
        return fn(u, dt, A, B, C, D=D, z=z, delta_bias=bias, delta_softplus=True)
    x, weight, bias, silu = args
    return fn(x, weight, bias, activation="silu" if silu else None)


def computes_reference(kind: str, fn: Any, probed: dict) -> bool:
    """Does ``fn``, called as the mixer calls it, compute ``kind``'s reference on a small fp32
    probe (the convolution with silu and without)?"""
    from ..problems import get_problem

    key = (id(fn), f"{kind} probe")
    if key not in probed:
        problem = get_problem(kind)
        ok = True
        for silu in ((1, 0) if kind == "causal_conv1d" else (None,)):
            shape = dict(PROBE_SHAPES[kind], **({"silu": silu} if silu is not None else {}))
            args = problem.make_inputs(shape, torch.float32, "cpu", 0)
            try:
                with torch.no_grad():
                    got = _probe_call(kind, fn, args)
                want = problem.reference(*args)
                ok = ok and isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(
                    got, want, rtol=1e-4, atol=1e-5)
            except Exception:  # noqa: BLE001 - a look-alike that cannot run on the probe is not Mamba's
                ok = False
        probed[key] = ok
    return probed[key]


def _code_names(fn: Any) -> tuple[str, ...]:
    inner = module_wrapped_function(fn)
    return tuple(getattr(getattr(inner, "__code__", None), "co_names", ()))


def rebound_forward(cls: type, k: KernelOp, probed: dict) -> dict[str, Callable] | None:
    """``cls.forward`` with its own globals, in which ``k``'s function, or the one function it
    calls by name that calls it, reaches ``replacement``; None where neither is there or the
    function found computes something else."""
    function = FUNCTIONS[k.kind][0]
    forward = cls.forward
    inner = inspect.unwrap(forward)
    if not isinstance(inner, types.FunctionType):
        return None
    names = inner.__globals__
    if function in inner.__code__.co_names:
        original = names.get(function)
        if not computes_reference(k.kind, original, probed):
            return None
        swapped = {function: replacement(k, original)}
    else:
        callers = [n for n in inner.__code__.co_names if n in names and function in _code_names(names[n])]
        if len(callers) != 1:
            return None
        caller = module_wrapped_function(names[callers[0]])
        original = caller.__globals__.get(function) if isinstance(caller, types.FunctionType) else None
        if original is None or not computes_reference(k.kind, original, probed):
            return None
        swapped = {callers[0]: _rebound(caller, {function: replacement(k, original)})}
    new = rewrap(forward, _rebound(inner, swapped))
    return None if new is None else {"forward": new}


def _apply_mixer_function(model, k, done, replaced, skipped, probed) -> None:
    before = len(replaced)
    apply_rewritten_members(model, k, k.kind, k.kind, lambda k: k, lambda cls, k: rebound_forward(cls, k, probed),
                            probed, replaced)
    placed = {name for name, kind in replaced[before:]}
    function = FUNCTIONS[k.kind][0]
    for name in sorted(set(k.problem.modules) - placed):
        skipped.append((name, f"{k.kind}: its forward calls no {function} (nor a function that does) that computes "
                              "the problem's reference"))
