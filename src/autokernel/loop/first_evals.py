"""The first evaluation of every problem (its starting kernel) comes out of the budget too.

``order`` puts the cheapest first on CPU (estimated interpreter cost over the target shapes),
so that a short budget starts as many problems as it can; on a GPU the given (Amdahl) order
stays.  ``timeout`` bounds each first evaluation by its share of what is left of the budget:
its per-request timeout is at most that share divided by ``REQUESTS_PER_SHARE``, so one slow
starting kernel cannot take the whole budget.
"""
from __future__ import annotations

REQUESTS_PER_SHARE = 4
MIN_TIMEOUT_S = 10.0  # below this a GPU's first compile of a kernel could time out


def estimated_cost(problem, shapes, dtype_names) -> float:
    """Rough interpreter seconds of one call at each target shape, summed (0 when unknown)."""
    from ..interpreter_cost import estimate_call_seconds
    from ..problems.base import parse_dtype

    try:
        shapes = list(shapes or problem.cpu_shapes)
        dtypes = [parse_dtype(d) for d in dtype_names] if dtype_names else list(problem.dtypes)[:1]
    except Exception:
        return 0.0
    return sum(estimate_call_seconds(problem, s, d) for s in shapes for d in dtypes)


def order(items: list, costs: list[float], device: str) -> list:
    """``items`` in the order their first evaluations run."""
    if str(device).startswith("cuda"):
        return list(items)
    ranked = sorted(range(len(items)), key=lambda i: (costs[i], i))
    return [items[i] for i in ranked]


def timeout(timeout_s: float, remaining_s: float | None, evaluations_left: int) -> float:
    """The per-request timeout of a first evaluation: the usual one, or less when the budget's
    share of each first evaluation is smaller."""
    if remaining_s is None or evaluations_left <= 0:
        return timeout_s
    share = remaining_s / evaluations_left
    return max(MIN_TIMEOUT_S, min(timeout_s, share / REQUESTS_PER_SHARE))
