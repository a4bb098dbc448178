"""Under ``torch.compile`` of a patched model: our op, or the problem's eager op traced for
inductor (``apply(..., under_compile=)``).

Our ops are opaque to inductor: it cannot fuse across them, and each keeps its launch inside the
compiled graph.  Measured on the H200, torch.compile of the patched model stayed 1-3% below the
faster of the patched model and torch.compile of the original (BENCHMARKS.md).  So, while
torch.compile traces the model, an op can hand inductor the problem's eager op instead (the very
function the judge's torch.compile baseline compiled), and inductor compiles and fuses it as it
would in the original model:

- ``auto`` (default): the eager op where the judge measured torch.compile of it at least as fast
  as our kernel at the plan's shapes (the baselines cache of the machine that ran the loop,
  weighted by calls per forward, as a result's score is); our kernel elsewhere, and wherever no
  torch.compile time was measured here (every CPU run);
- ``ours``: our kernel everywhere (what ``apply`` did before);
- ``eager``: the eager op everywhere: torch.compile of the patched model compiles the original's
  graph.

Eager calls of the patched model (no torch.compile) always run our kernels.
"""
from __future__ import annotations

from typing import Any, Callable

from ..harness.baselines import cached_baseline
from ..problems.base import parse_dtype
from .ops import TRACED_UNDER_COMPILE, output_meta

UNDER_COMPILE = ("auto", "ours", "eager")


def compile_score_us(kind_problem: Any, plan_problem: Any, device_name: str) -> float | None:
    """torch.compile of the problem's eager op at the plan's shapes, microseconds a forward
    (calls-weighted), from the baselines cache; None unless every shape was timed here."""
    dtype = parse_dtype(plan_problem.dtype)
    total = 0.0
    for shape, calls in zip(plan_problem.shapes, plan_problem.calls):
        timed = cached_baseline(kind_problem, device_name, dict(shape), dtype)
        if timed is None or not timed.compile_us:
            return None
        total += calls * timed.compile_us
    return total


def choose(mode: str, kind_problem: Any, plan_problem: Any, ours_us: float | None,
           device_name: str) -> tuple[bool, str]:
    """(trace the eager op under torch.compile?, why), for one applied problem."""
    if mode == "ours":
        return False, "our kernel (under_compile=ours)"
    if mode == "eager":
        return True, "the eager op, traced (under_compile=eager)"
    compiled = compile_score_us(kind_problem, plan_problem, device_name)
    if compiled is None or not ours_us:
        return False, "our kernel (no torch.compile time of the op measured on this machine)"
    if compiled <= ours_us:
        return True, (f"the eager op, traced: torch.compile of it took {compiled:.1f} us a forward, "
                      f"our kernel {ours_us:.1f}")
    return False, f"our kernel: {ours_us:.1f} us a forward, torch.compile of the eager op {compiled:.1f}"


def traced_eager(kind: str, eager: Callable[..., Any]) -> Callable[..., Any]:
    """The eager op as our op's stand-in under torch.compile: its outputs in the dtypes our op
    declares (a no-op where they agree)."""
    def stand_in(*args: Any) -> Any:
        _shape, dtype = output_meta(kind, args)
        out = eager(*args)
        if isinstance(out, (tuple, list)):
            return tuple(o.to(dtype) for o in out)
        return out.to(dtype)

    return stand_in


def set_policy(opname: str, kind: str, eager: Callable[..., Any] | None, trace: bool) -> None:
    if trace and eager is not None:
        TRACED_UNDER_COMPILE[opname] = traced_eager(kind, eager)
    else:
        TRACED_UNDER_COMPILE.pop(opname, None)

