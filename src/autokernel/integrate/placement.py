"""Before the loop: which of a plan's problems ``apply`` can place in the model.

The profiler finds a kind wherever the model computes it; ``apply`` switches only the places it
knows how to (modules, calls it can rebind).  A softmax written as ``F.softmax`` inside a
function the model calls (not a module's forward) is found but has no place, and an overnight run
would spend budget on a kernel that never runs in the model.  So the appliers are run once on the model as it is, with a stub
op for every problem (no kernel is imported or run), and a problem that takes no place is
reported, not optimized.  Where a problem takes some of its places but not others (BART's
positional embeddings), the time of the others counts as not
covered, by module.  Given the profile's inputs, the stub ops compute the problems' eager ops and
the copy runs one forward: a placed problem whose op takes none of its calls (a switch that hands
them all back to PyTorch) is reported too, and a module short of its calls keeps only the taken
share of its time (``call_counts``).
"""
from __future__ import annotations

import contextlib
import copy
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch
import torch.nn as nn

from ..plan import Plan, PlanProblem, UncoveredTime
from ..problems.base import parse_dtype
from .apply import NO_PLACE, place_ops
from .call_counts import EXTRA_CALLS, CallShortfall, counting, kernel_source, shortfall
from .class_cache import _SUBCLASSES
from .ops import SCHEMAS, register_kernel_op
from .row_adds import ROW_ADD, SCALED
from .selection import DECLINED, KernelOp

# for the kinds a model most often computes outside what apply switches: what it does switch
SWITCHES = {
    "softmax": "apply switches torch.nn.Softmax(dim=-1) modules, and F.softmax / torch.softmax calls over the last "
               "dim in the forward of a module the problem names (not in the functions it calls)",
    "cross_entropy": "apply switches torch.nn.CrossEntropyLoss modules with default settings",
    "layernorm": "apply switches torch.nn.LayerNorm modules",
    "reduce": "apply puts reduce kernels nowhere: the kind is a problem of its own",
    "relative_position_bias": "apply switches compute_bias(query_length, key_length, device, past_seen_tokens) of "
                              "attention modules holding T5's relative_attention_bias table",
    "softcap": "apply rewrites x = x / C; x = torch.tanh(x); x = x * C (or C * torch.tanh(e / C), "
               "e.div(C).tanh().mul(C)) in a forward, the same C both times",
    "shifted_windows": "apply rewrites window_partition(self.cyclic_shift(x), self.window_size) and "
                       "self.cyclic_shift(window_reverse(a, self.window_size, h, w), reverse=True) in a Swin layer's forward",
    "window_bias": "apply rewrites a Swin layer's self.get_attn_mask(...) call and its attention's "
                   "self.relative_position_bias() + mask statements",
    "xielu": "apply switches xIELU activation modules (one-element alpha_p, alpha_n, beta and eps tensors) "
             "whose forward matches the reference on a probe",
    "selective_scan": "apply rebinds mamba_selective_scan in the forward of a module that calls it (or calls a "
                      "function that does), after a probe of the function",
    "causal_conv1d": "apply rebinds causal_conv1d_fn in the forward of a module that calls it (or calls a function "
                     "that does), after a probe of the function",
}
# what the appliers switch never calls its kernel, so the op's kernel is never run here
_STUB_KERNEL = "def kernel_fn(*args):\n    raise RuntimeError('placement stub: never run')\n"


def structural_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model``'s modules that shares its parameters and buffers (the appliers
    swap classes and rebind functions; they do not write weights): no second copy of the weights."""
    memo = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return copy.deepcopy(model, memo)


@dataclass
class PlacementCheck:
    """What ``apply`` could place: ``unplaceable`` problem -> why it takes no place at all;
    ``unplaced`` problem -> {module: why} for the modules of a problem placed elsewhere."""

    unplaceable: dict[str, str] = field(default_factory=dict)
    unplaced: dict[str, dict[str, str]] = field(default_factory=dict)
    # with inputs (``call_counts``): placed problems whose op took fewer calls than planned, and
    # why the counting forward could not run (then nothing is counted)
    short: dict[str, CallShortfall] = field(default_factory=dict)
    count_error: str = ""
    counted: dict[str, int] = field(default_factory=dict)  # problem -> its op's calls in that forward
    # placed problems whose op took more calls than planned: problem -> (planned, counted)
    extra: dict[str, tuple[float, int]] = field(default_factory=dict)


def check_placement(model: nn.Module, plan: Plan, inputs: tuple | None = None,
                    captured: bool = False) -> PlacementCheck:
    """Run the appliers on a structural copy of ``model`` with a stub op for each supported
    problem; ``model`` is left as it was.  With ``inputs`` the stub ops compute the problems' eager
    ops and count their calls, and the copy runs one forward on them (``as_captured`` where
    ``captured``): a placed problem whose op takes fewer calls than planned is in ``short``."""
    check = PlacementCheck()
    candidates = [p for p in plan.supported if p.kind in SCHEMAS]
    for p in plan.supported:
        if p.kind not in SCHEMAS:
            check.unplaceable[p.name] = f"{p.kind}: autokernel has no way to put this kind into a model"
    if not candidates:
        return check
    with tempfile.TemporaryDirectory(prefix="autokernel-placement-") as tmp:
        ops = []
        for p in candidates:
            path = Path(tmp) / f"{p.name}.py"
            path.write_text(_STUB_KERNEL if inputs is None else kernel_source(p.kind, p.name))
            opname, op = register_kernel_op(p.kind, f"placement_{p.name}", path)
            ops.append(KernelOp(p, opname, op, parse_dtype(p.dtype), path))
        patched = structural_copy(model)
        with _own_classes():
            placed = place_ops(patched, ops)
            if inputs is not None:
                tally, check.count_error = _count_calls(patched, inputs, captured)
    for k in ops:
        if k.opname not in placed.used_ops:
            where = [f"found in {', '.join(k.problem.modules[:3])}"] if k.problem.modules else []
            where += [SWITCHES[k.kind]] if k.kind in SWITCHES else []
            check.unplaceable[k.problem.name] = f"{k.kind}: {NO_PLACE}" + (f" ({'; '.join(where)})" if where else "")
            continue
        # the root module's own share is recorded under "" (not one of ``modules``: the appliers
        # read those as names to relate theirs to)
        places = list(k.problem.modules) + ([""] if "" in k.problem.module_time_us else [])
        missing = {m: _why(m, k.kind, placed.skipped) for m in places
                   if not _placed_at(m, k.kind, placed.replaced)}
        if missing:
            check.unplaced[k.problem.name] = missing
    if inputs is not None and not check.count_error:
        for k in ops:
            if k.opname in placed.used_ops:
                stacks = tally.get(k.problem.name, [])
                check.counted[k.problem.name] = len(stacks)
                gap = shortfall(k.problem, stacks, set(check.unplaced.get(k.problem.name, {})))
                if gap is not None:
                    check.short[k.problem.name] = gap
                planned = float(sum(k.problem.calls))
                if gap is None and len(stacks) > planned + 0.5:
                    check.extra[k.problem.name] = (planned, len(stacks))
    return check


@contextlib.contextmanager
def _own_classes() -> Iterator[None]:
    """The appliers' classes for the check's copy made afresh and dropped with it: they hold the
    check's stand-in ops, whose files go with the check, and no later ``apply`` should look at them
    (since the class cache compares what a class holds, ``class_cache.py``, none would reuse them:
    this keeps them from piling up in it)."""
    kept = dict(_SUBCLASSES)
    _SUBCLASSES.clear()
    try:
        yield
    finally:
        _SUBCLASSES.clear()
        _SUBCLASSES.update(kept)


def _count_calls(patched: nn.Module, inputs: tuple, captured: bool) -> tuple[dict[str, list], str]:
    """One forward of the patched copy with the counting stand-in ops: each problem's calls (the
    module stack at each), or why the forward failed."""
    from ..profiler import as_captured

    try:
        with torch.no_grad(), as_captured(captured), counting(patched) as tally:
            patched(*inputs)
    except Exception as exc:  # the appliers' code raising here would raise in apply's model too
        return {}, f"{type(exc).__name__}: {exc}"
    return tally, ""


def _placed_at(module: str, kind: str, replaced: list[tuple[str, str]]) -> bool:
    """Did the appliers switch the place where ``module``'s share of the problem runs, for this
    kind?  ``module`` is the innermost module around the op (the profiler's attribution; "" for
    the model's own forward).  For every kind but matmul that is the module itself: its applier
    switched it or rewrote its forward.  A switch of a module inside it or around it does not
    place it (an F.layer_norm in a block's forward is not placed by switching the block's
    nn.LayerNorm child; Whisper's stems, conv + F.gelu in the encoder's forward, were not placed
    by switching the encoder's layers for linear_gelu, and counted as covered before their
    applier existed; linear_relu switching OPT's layer does not place the add_layernorm its
    applier skipped inside it).  A matmul's module is the innermost one around the GEMM: a
    linear layer, or a module whose own forward calls matmul (eager attention's q @ k^T).  Only
    switching it or a module around it places that GEMM; switching its linear children does not.
    A row added onto a linear's output (``row_adds``), or a scale of it by a number, is the
    matmul share of the module whose forward writes it: rewriting that forward places it, and
    nothing inside that module."""
    if kind == "matmul":
        switched = [name for name, done in replaced if done == kind]
        return (any(name == module or module.startswith(name + ".") for name in switched)
                or (module, ROW_ADD) in replaced or (module, SCALED) in replaced)
    return (module, kind) in replaced


def _why(module: str, kind: str, skipped: list[tuple[str, str]]) -> str:
    return next((why for name, why in skipped if name == module and why.startswith(kind)), f"{kind}: {NO_PLACE}")


def mark_placement(plan: Plan, model: nn.Module, inputs: tuple | None = None, captured: bool = False) -> None:
    """Mark the plan's problems that ``apply`` finds no place for as unsupported, with the
    reason: the loop leaves them out and their time counts as not covered.  A problem placed at
    some of its modules only keeps the time of those (``module_time_us``); the others' time
    counts as not covered, named, and its note says where and why; the shapes only those ran
    leave the problem (the loop would tune for calls the kernel never gets).  With ``inputs``
    the patched copy's calls are counted too (``check_placement``): a placed problem whose op took
    none of its calls is unsupported, and the modules short of their calls lose that share of their
    time (``mark_short``)."""
    check = check_placement(model, plan, inputs, captured)
    if check.count_error:
        warnings.warn(f"the placement check's counting forward failed ({check.count_error}): the calls each "
                      f"problem's op takes in the patched model were not counted", stacklevel=2)
    for p in plan.problems:
        if p.name in check.unplaceable:
            p.supported = False
            p.note = "; ".join(filter(None, [check.unplaceable[p.name], p.note]))
        elif p.name in check.unplaced and p.module_time_us:
            missing = check.unplaced[p.name]
            names = list(missing)
            moved = sum(p.module_time_us.pop(m, 0.0) for m in names)
            if moved > 0:
                fraction = moved / plan.total_time_us if plan.total_time_us > 0 else 0.0
                p.time_us = max(0.0, p.time_us - moved)
                p.fraction = max(0.0, p.fraction - fraction)
                more = f" and {len(names) - 1} more" if len(names) > 1 else ""
                plan.uncovered.append(UncoveredTime(f"{p.name} ({p.kind}) at {_shown(names[0])}{more}, not placeable",
                                                    moved, fraction))
            drop_shapes_of(p, names)
            where = ", ".join(map(_shown, names[:3])) + (f" (+{len(names) - 3})" if len(names) > 3 else "")
            p.note = "; ".join(filter(None, [p.note, f"not placeable at {where}: {missing[names[0]]}"]))
    for p in plan.problems:
        if p.supported and p.name in check.short:
            mark_short(plan, p, check.short[p.name])
        elif p.name in check.extra:  # work the model did not do, or calls the profile gave no problem
            planned, counted = check.extra[p.name]
            p.note = "; ".join(filter(None, [p.note, f"{EXTRA_CALLS}: {counted} a forward, {planned:g} planned"]))


def mark_short(plan: Plan, p: PlanProblem, gap: CallShortfall) -> None:
    """A placed problem whose op took fewer calls than planned: none at all, unsupported; else each
    module short of its calls keeps the share of its time its op took (the rest not covered, named),
    and one that took none of its calls leaves the problem's shapes."""
    if gap.counted == 0:
        p.supported = False
        p.note = "; ".join(filter(None, [f"{p.kind}: {DECLINED} (none of its {gap.planned:g} calls a forward: "
                                         f"the switched code hands them to PyTorch)", p.note]))
        return
    moved = 0.0
    if gap.modules:
        for m, (planned, got) in gap.modules.items():
            us = p.module_time_us.pop(m, None)
            if us is not None:
                moved += us * (1 - got / planned)
                if got:
                    p.module_time_us[m] = us * got / planned
        drop_shapes_of(p, [m for m, (_, got) in gap.modules.items() if got == 0])
    else:
        moved = p.time_us * (1 - gap.counted / gap.planned)
    names = list(gap.modules)
    where = (f" at {_shown(names[0])}" + (f" and {len(names) - 1} more" if len(names) > 1 else "")) if names else ""
    if moved > 0:
        fraction = moved / plan.total_time_us if plan.total_time_us > 0 else 0.0
        p.time_us = max(0.0, p.time_us - moved)
        p.fraction = max(0.0, p.fraction - fraction)
        plan.uncovered.append(UncoveredTime(f"{p.name} ({p.kind}){where}, calls not taken", moved, fraction))
    shown = "; ".join(f"{_shown(m)} {got} of {planned:g}" for m, (planned, got) in list(gap.modules.items())[:3])
    p.note = "; ".join(filter(None, [p.note, f"{DECLINED}: its op took {gap.counted} of {gap.planned:g} calls a forward"
                                            + (f" ({shown})" if shown else "")]))


def _shown(module: str) -> str:
    return module or "the model's own forward"


def drop_shapes_of(problem: PlanProblem, modules: list[str]) -> None:
    """Take ``modules``' calls out of ``problem``'s shapes (``module_calls``); a shape left with
    none leaves the problem.  Shapes whose modules are not known stay."""
    gone: dict[int, float] = {}
    for m in modules:
        for i, calls in problem.module_calls.pop(m, []):
            gone[int(i)] = gone.get(int(i), 0.0) + calls
    keep = [i for i in range(len(problem.shapes)) if problem.calls[i] - gone.get(i, 0.0) >= 0.5]
    if not gone or not keep:
        return
    new_index = {old: new for new, old in enumerate(keep)}
    problem.calls = [max(1, round(problem.calls[i] - gone.get(i, 0.0))) for i in keep]
    problem.shapes = [problem.shapes[i] for i in keep]
    problem.module_calls = {m: [[new_index[int(i)], c] for i, c in pairs if int(i) in new_index]
                            for m, pairs in problem.module_calls.items()}
