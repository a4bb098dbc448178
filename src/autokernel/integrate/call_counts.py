"""After placement: does each placed problem's op take the calls the plan expects?

``placement`` reads what the appliers switched; a switched place can still hand every call back
to PyTorch (GPT-NeoX's and Nemotron's partial rotary: the function was rebound, its replacement
declined tables narrower than the heads), or take one of two calls of a kind in one forward (time
is attributed per module, not per call).  So the patched copy runs one forward with a stand-in op
per problem that computes the problem's eager op (the model's output stays right) and records
where it was called: the module scopes open at the call (forward hooks, as the profiler's).

A call counts for the plan module of its problem that is deepest on the stack at the call; a
call inside no such module counts for a module whose parent (a rewritten forward that holds the
module's work: the residual add before a norm) or whose ``add_from`` (the add fused ahead, run at
the end of the previous block) is on the stack.  Among several, the one still short of its planned
calls takes it.
"""
from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch.nn as nn

from ..plan import PlanProblem

# a placed problem's note where its op took more calls than the plan has (coverage stays as it is)
EXTRA_CALLS = "its op takes more calls than planned"
# while ``counting`` runs: the module names open now, outermost first, and each problem's calls
_STACK: list[str] = []
_TALLY: dict[str, list[tuple[str, ...]]] | None = None


def counting_reference(kind: str, problem: str) -> Callable[..., Any]:
    """A ``kernel_fn`` computing ``kind``'s eager op (its reference where it has none) that records
    the module stack of each call for ``problem`` while ``counting`` runs."""
    from ..problems import get_problem
    from .compile_policy import traced_eager

    kind_problem = get_problem(kind)
    compute = traced_eager(kind, kind_problem.eager or kind_problem.reference)

    def kernel_fn(*args: Any) -> Any:
        if _TALLY is not None:
            _TALLY.setdefault(problem, []).append(tuple(_STACK))
        return compute(*args)

    return kernel_fn


def kernel_source(kind: str, problem: str) -> str:
    return (f"from autokernel.integrate.call_counts import counting_reference\n"
            f"kernel_fn = counting_reference({kind!r}, {problem!r})\n")


@contextlib.contextmanager
def counting(model: nn.Module) -> Iterator[dict[str, list[tuple[str, ...]]]]:
    """While active: every module call of ``model`` opens its name on the stack, and the
    stand-in ops' calls are recorded (problem -> the stack at each call)."""
    global _TALLY
    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(_opener(name)))
        handles.append(module.register_forward_hook(_close, always_call=True))
    tally: dict[str, list[tuple[str, ...]]] = {}
    _TALLY, before = tally, list(_STACK)
    _STACK.clear()
    try:
        yield tally
    finally:
        _TALLY = None
        _STACK[:] = before
        for h in handles:
            h.remove()


def _opener(name: str) -> Callable[..., None]:
    def open_(module: nn.Module, args: Any) -> None:
        _STACK.append(name)
    return open_


def _close(module: nn.Module, args: Any, output: Any) -> None:  # None: the output stays as it is
    if _STACK:
        _STACK.pop()


@dataclass
class CallShortfall:
    """A placed problem whose op took fewer calls than planned: ``planned`` and ``counted`` in all,
    and per module (only the modules short of their planned calls)."""

    planned: float
    counted: int
    modules: dict[str, tuple[float, int]] = field(default_factory=dict)  # module -> (planned, counted)


def planned_calls(p: PlanProblem) -> dict[str, float]:
    """Module -> the calls per forward the plan expects there (from ``module_calls``)."""
    return {m: sum(float(c) for _, c in pairs) for m, pairs in p.module_calls.items()}


def _parent(module: str) -> str:
    return module.rpartition(".")[0]


def assign(p: PlanProblem, stacks: list[tuple[str, ...]], planned: dict[str, float]) -> Counter:
    """Each recorded call's module among ``planned`` (the module docstring's rule); calls that fit
    none: ``None``."""
    got: Counter = Counter()
    for stack in stacks:
        scope = ("",) + stack  # the root module is "" in a plan
        on = [m for m in reversed(scope) if m in planned]
        if not on:
            open_ = set(scope)
            on = [m for m in planned if (m and _parent(m) in open_) or p.add_from.get(m) in open_]
            on.sort(key=lambda m: -max(len(s) for s in (_parent(m), p.add_from.get(m, "")) if s in open_))
        short = [m for m in on if got[m] < planned[m] - 0.5]
        got[(short or on or [None])[0]] += 1
    return got


def shortfall(p: PlanProblem, stacks: list[tuple[str, ...]], unplaced: set[str] = frozenset()) -> CallShortfall | None:
    """How far ``p``'s op fell short of the calls its plan expects, or None.  ``unplaced``: its
    modules the appliers did not switch (``placement`` counts those already)."""
    if p.module_calls:
        planned = {m: n for m, n in planned_calls(p).items() if m not in unplaced}
        total = sum(planned.values())
        got = assign(p, stacks, planned)
        short = {m: (n, got[m]) for m, n in planned.items() if got[m] < n - 0.5}
        if short or len(stacks) < total - 0.5:
            return CallShortfall(total, len(stacks), short)
        return None
    total = float(sum(p.calls))
    return CallShortfall(total, len(stacks)) if len(stacks) < total - 0.5 else None
