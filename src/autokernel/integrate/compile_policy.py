"""Under ``torch.compile`` of a patched model: our op, or the problem's eager op traced for
inductor (``apply(..., under_compile=)``).

Our ops are opaque to inductor: it cannot fuse across them, and each keeps its launch inside the
compiled graph.  Measured on the H200, torch.compile of the patched model stayed 1-3% below the
faster of the patched model and torch.compile of the original (BENCHMARKS.md).  So, while
torch.compile traces the model, an op can hand inductor the problem's eager op instead (the very
function the judge's torch.compile baseline compiled), and inductor compiles and fuses it as it
would in the original model:

- ``auto`` (default): where the last ``verify`` on this machine timed torch.compile of this very
  patched model (the same kernel files) both per op and with every op handed to inductor, and the
  latter was faster, the eager op everywhere (``verify`` makes that second measurement whenever
  torch.compile of the patched model was slower than of the original).  Otherwise, per op: the
  eager op where the judge measured torch.compile of it at least as fast as our kernel at the
  plan's shapes (the baselines cache of the machine that ran the loop, weighted by calls per
  forward, as a result's score is); our kernel elsewhere, and wherever no torch.compile time was
  measured here (every CPU run);
- ``ours``: our kernel everywhere (what ``apply`` did before);
- ``eager``: the eager op everywhere: torch.compile of the patched model compiles the original's
  graph: a place with an op handed over computes in the model's own shapes, and a swapped rotary
  function calls the model's own (``ops.traced_as_original``, ``ops.rows``: why);
- ``uncompiled``: torch.compile leaves the patched model out (``torch.compiler.disable`` on its
  forward): it runs our kernels as in eager calls.  ``auto`` chooses this where the last
  ``verify`` here found torch.compile of the patched model, both ways above, slower than the
  patched model uncompiled (the LLaMA example on the H200, two of three runs: torch.compile of
  the patched model 7-9% slower than the patched model, either way; BENCHMARKS.md, tenth
  session, timed in blocks before ``verify`` timed in rotated rounds), and timed it.

Eager calls of the patched model (no torch.compile) always run our kernels.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from ..harness.baselines import cached_baseline
from ..problems.base import parse_dtype
from .ops import TRACED_UNDER_COMPILE, output_meta
from .runfiles import recorded_measurement

UNDER_COMPILE = ("auto", "ours", "eager", "uncompiled")


@dataclass
class ModelChoice:
    """What ``verify`` measured of torch.compile of the whole patched model: with each op as
    ``auto`` chose per op (``per_op_ms``), with every op handed to inductor (``eager_ms``, None
    when not timed) and with the patched model left out of the compile (``uncompiled_ms``)."""
    policy: str  # "eager" (every op handed to inductor) | "per-op" | "uncompiled"
    per_op_ms: float
    eager_ms: float | None
    device_name: str
    kernels: dict[str, str]  # problem -> digest of the kernel file that was applied
    uncompiled_ms: float | None = None
    cuda_graphs: bool = False  # measured on the CUDA-graph wrapper (apply(cuda_graphs=True)): holds for it only

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def whole_model_policy(per_op_ms: float, eager_ms: float | None, uncompiled_ms: float | None = None) -> str:
    """The fastest of the measured ways (ties keep the earlier: per op, every op handed over, left out)."""
    timed = [(per_op_ms, "per-op")] + [(ms, name) for ms, name in ((eager_ms, "eager"), (uncompiled_ms, "uncompiled"))
                                       if ms is not None]
    return min(timed, key=lambda t: t[0])[1]


def _ms(value: float | None) -> str:
    return "not timed" if value is None else f"{value:.3f} ms"


def leave_uncompiled(model: Any) -> None:
    """torch.compile of ``model`` runs it as it is: dynamo skips its forward (and what it calls).
    The class's forward, disabled, bound to the model by a partial: a deep copy of the model binds
    its copy (a disabled bound method would keep calling the original)."""
    import torch

    if getattr(model, "_autokernel_uncompiled", False):
        return
    model.forward = functools.partial(torch.compiler.disable(type(model).forward, recursive=True), model)
    model._autokernel_uncompiled = True


def compile_again(model: Any) -> None:
    """Undo ``leave_uncompiled``."""
    if getattr(model, "_autokernel_uncompiled", False):
        del model.forward
        model._autokernel_uncompiled = False


def kernel_digests(ops: list) -> dict[str, str]:
    return {k.problem.name: hashlib.sha256(Path(k.path).read_bytes()).hexdigest()[:16] for k in ops}


def recorded_choice(workdir: Path, device_name: str, ops: list, cuda_graphs: bool = False) -> ModelChoice | None:
    """The whole-model measurement of the last ``verify`` (its ``verify.json``), if it was made on
    this kind of device with exactly these kernel files, in the same mode (CUDA graphs or not);
    None otherwise."""
    return recorded_measurement(workdir, "compile_choice", ModelChoice, device_name, kernel_digests(ops), cuda_graphs)


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
           device_name: str, measured: ModelChoice | None = None) -> tuple[bool, str]:
    """(trace the eager op under torch.compile?, why), for one applied problem."""
    if mode == "ours":
        return False, "our kernel (under_compile=ours)"
    if mode == "eager":
        return True, "the eager op, traced (under_compile=eager)"
    if mode == "uncompiled":
        return False, "our kernel: torch.compile leaves the patched model out (under_compile=uncompiled)"
    if measured is not None and measured.policy == "eager":
        return True, (f"the eager op, traced: verify timed torch.compile of this patched model at "
                      f"{measured.eager_ms:.3f} ms so, {measured.per_op_ms:.3f} ms with the ops chosen one by one")
    if measured is not None and measured.policy == "uncompiled":
        return False, (f"our kernel: torch.compile leaves the patched model out; verify timed it so at "
                       f"{measured.uncompiled_ms:.3f} ms, compiled {measured.per_op_ms:.3f} ms with the ops chosen one "
                       f"by one and {_ms(measured.eager_ms)} with every op handed to inductor")
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


def set_policies(ops: list, mode: str, device_name: str, measured: ModelChoice | None = None) -> dict[str, str]:
    """Decide, per applied op (``selection.KernelOp``), what it runs under torch.compile; problem ->
    the decision and why."""
    from ..problems import get_problem

    decided = {}
    for k in ops:
        kind_problem = get_problem(k.kind)
        trace, why = choose(mode, kind_problem, k.problem, k.best_us, device_name, measured)
        set_policy(k.opname, k.kind, kind_problem.eager or kind_problem.reference, trace)
        decided[k.problem.name] = why
    return decided
