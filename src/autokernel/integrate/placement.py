"""Before the loop: which of a plan's problems ``apply`` can place in the model.

The profiler finds a kind wherever the model computes it; ``apply`` switches only the places it
knows how to (modules, calls it can rebind).  A softmax written as ``F.softmax`` inside a
router's forward is found but has no place, and an overnight run would spend budget on a kernel
that never runs in the model.  So the appliers are run once on the model as it is, with a stub
op for every problem (no kernel is imported or run), and a problem that takes no place is
reported, not optimized.
"""
from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import torch.nn as nn

from ..plan import Plan
from ..problems.base import parse_dtype
from .apply import NO_PLACE, place_ops
from .ops import SCHEMAS, register_kernel_op
from .selection import KernelOp

# for the kinds a model most often computes outside what apply switches: what it does switch
SWITCHES = {
    "softmax": "apply switches torch.nn.Softmax(dim=-1) modules, not F.softmax calls",
    "cross_entropy": "apply switches torch.nn.CrossEntropyLoss modules with default settings",
    "layernorm": "apply switches torch.nn.LayerNorm modules",
    "reduce": "apply puts reduce kernels nowhere: the kind is a problem of its own",
}
# what the appliers switch never calls its kernel, so the op's kernel is never run here
_STUB_KERNEL = "def kernel_fn(*args):\n    raise RuntimeError('placement stub: never run')\n"


def structural_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model``'s modules that shares its parameters and buffers (the appliers
    swap classes and rebind functions; they do not write weights): no second copy of the weights."""
    memo = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return copy.deepcopy(model, memo)


def unplaceable(model: nn.Module, plan: Plan) -> dict[str, str]:
    """Problem name -> why ``apply`` finds no place for it, for the plan's supported problems.
    ``model`` is left as it was."""
    reasons: dict[str, str] = {}
    candidates = [p for p in plan.supported if p.kind in SCHEMAS]
    for p in plan.supported:
        if p.kind not in SCHEMAS:
            reasons[p.name] = f"{p.kind}: autokernel has no way to put this kind into a model"
    if not candidates:
        return reasons
    with tempfile.TemporaryDirectory(prefix="autokernel-placement-") as tmp:
        ops = []
        for p in candidates:
            path = Path(tmp) / f"{p.name}.py"
            path.write_text(_STUB_KERNEL)
            opname, op = register_kernel_op(p.kind, f"placement_{p.name}", path)
            ops.append(KernelOp(p, opname, op, parse_dtype(p.dtype), path))
        placed = place_ops(structural_copy(model), ops)
    for k in ops:
        if k.opname not in placed.used_ops:
            where = [f"found in {', '.join(k.problem.modules[:3])}"] if k.problem.modules else []
            where += [SWITCHES[k.kind]] if k.kind in SWITCHES else []
            reasons[k.problem.name] = f"{k.kind}: {NO_PLACE}" + (f" ({'; '.join(where)})" if where else "")
    return reasons


def mark_unplaceable(plan: Plan, model: nn.Module) -> None:
    """Mark the plan's problems that ``apply`` finds no place for as unsupported, with the
    reason: the loop leaves them out and their time counts as not covered."""
    reasons = unplaceable(model, plan)
    for p in plan.problems:
        if p.name in reasons:
            p.supported = False
            p.note = "; ".join(filter(None, [reasons[p.name], p.note]))
