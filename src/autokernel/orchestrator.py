"""Where the next experiment goes: Amdahl's law over roofline headroom (DESIGN §3).

Pure functions over ``ProblemState`` records; the loop owns the states and updates them with
``after_experiment``.  Decisions, in words:

* A kernel taking fraction ``f`` of the model's time made ``s`` times faster speeds the model
  up by ``amdahl(f, s) = 1 / ((1 - f) + f / s)``.
* What is still to gain on a problem is estimated from its roofline headroom: at ``p`` percent
  of the roofline the ideal speedup is ``100 / p``; we expect only part of it
  (``HEADROOM_DAMPING``), less after each experiment that found nothing
  (``STALL_DECAY ** since_improvement``).  Without a roofline (CPU timings) the estimate is
  ``DEFAULT_SPEEDUP``.  The fraction used is the problem's *current* share of the model time
  (its original share shrunk by the speedup already found).
* ``pick_next`` takes the largest expected end-to-end gain among problems not parked.
  A problem is parked after ``PARK_AFTER`` experiments in a row without improvement, at
  ``ROOFLINE_DONE`` percent of its roofline or more, when its own time budget is spent, or when
  its agent has exhausted its search space.
* When every problem is parked, ``return_to_headroom`` gives each one below the roofline
  threshold and not exhausted one more stretch, with a share of the remaining time;
  ``choose`` does pick-then-return in one call.  Without a time budget a problem returns once
  (only an improvement found during its return stretch earns it another), so an unbounded run
  ends; with time left it returns as often as it is parked, so a budget the user gave is used
  until the agent has exhausted its search space.  ``None`` means nothing is left to do.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

PARK_AFTER = 5
ROOFLINE_DONE = 90.0
HEADROOM_DAMPING = 0.5
STALL_DECAY = 0.8
DEFAULT_SPEEDUP = 1.5
MIN_BUDGET_SHARE = 0.5  # each problem gets at least this share of an equal split


@dataclass
class ProblemState:
    name: str
    fraction: float | None = None  # share of the model time (None: a single problem, counts as 1)
    pct_roofline: float | None = None  # of the current best; None when unknown (CPU)
    best_speedup: float = 1.0  # current best vs the starting kernel
    experiments: int = 0
    since_improvement: int = 0  # experiments in a row without a kept one
    time_spent_s: float = 0.0
    time_budget_s: float | None = None  # None: no per-problem limit
    exhausted: bool = False  # the agent has nothing left to propose
    returned: bool = False  # given a return stretch by return_to_headroom and found nothing since


def amdahl(fraction: float, speedup: float) -> float:
    """End-to-end speedup when a part taking ``fraction`` of the time gets ``speedup`` times faster."""
    if speedup <= 0:
        raise ValueError("speedup must be positive")
    fraction = min(max(fraction, 0.0), 1.0)
    return 1.0 / ((1.0 - fraction) + fraction / speedup)


def current_fraction(fraction: float, best_speedup: float) -> float:
    """The problem's share of the model time now that it runs ``best_speedup`` times faster."""
    fraction = min(max(fraction, 0.0), 1.0)
    if fraction == 0.0:
        return 0.0
    shrunk = fraction / max(best_speedup, 1e-9)
    return shrunk / ((1.0 - fraction) + shrunk)


def estimated_speedup(pct_roofline: float | None, since_improvement: int = 0) -> float:
    """How much faster we expect the problem's kernel can still get."""
    if pct_roofline is None or pct_roofline <= 0:
        ideal = DEFAULT_SPEEDUP
        potential = ideal - 1.0
    else:
        ideal = 100.0 / min(pct_roofline, 100.0)
        potential = HEADROOM_DAMPING * (ideal - 1.0)
    return 1.0 + potential * (STALL_DECAY ** max(since_improvement, 0))


def expected_gain(state: ProblemState) -> float:
    """Expected end-to-end improvement (``amdahl - 1``) from more work on this problem."""
    fraction = 1.0 if state.fraction is None else current_fraction(state.fraction, state.best_speedup)
    return amdahl(fraction, estimated_speedup(state.pct_roofline, state.since_improvement)) - 1.0


def park_reason(state: ProblemState) -> str | None:
    """Why the problem is set aside for now, or None when it may be worked on."""
    if state.exhausted:
        return "search space exhausted"
    if state.pct_roofline is not None and state.pct_roofline >= ROOFLINE_DONE:
        return f"at {state.pct_roofline:.0f}% of roofline"
    if state.since_improvement >= PARK_AFTER:
        return f"{state.since_improvement} experiments without improvement"
    if state.time_budget_s is not None and state.time_spent_s >= state.time_budget_s:
        return "its time budget is spent"
    return None


def pick_next(states: list[ProblemState], in_flight: dict[str, int] | None = None) -> str | None:
    """The name of the problem with the largest expected gain among those not parked.
    ``in_flight`` (experiments running per problem, when several run at once) ranks each
    problem as if those experiments had already found nothing, so the width spreads over the
    problems by their expected gain; it never parks a problem."""
    open_states = [s for s in states if park_reason(s) is None]
    if not open_states:
        return None
    running = in_flight or {}

    def rank(s: ProblemState):
        k = running.get(s.name, 0)
        pessimistic = replace(s, since_improvement=s.since_improvement + k, experiments=s.experiments + k)
        return (expected_gain(pessimistic), -pessimistic.experiments, _neg_name(s.name))

    return max(open_states, key=rank).name


def _neg_name(name: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in name)  # ties go to the alphabetically first name


def assign_budgets(states: list[ProblemState], total_s: float | None) -> list[ProblemState]:
    """Split ``total_s`` among the problems in proportion to their expected gain, each getting
    at least ``MIN_BUDGET_SHARE`` of an equal split.  ``None`` leaves them unlimited."""
    if total_s is None or not states:
        return [replace(s, time_budget_s=None) for s in states]
    gains = [max(expected_gain(s), 0.0) for s in states]
    floor = MIN_BUDGET_SHARE * total_s / len(states)
    spare = max(total_s - floor * len(states), 0.0)
    total_gain = sum(gains)
    out = []
    for state, gain in zip(states, gains):
        share = gain / total_gain if total_gain > 0 else 1.0 / len(states)
        out.append(replace(state, time_budget_s=state.time_spent_s + floor + spare * share))
    return out


def return_to_headroom(states: list[ProblemState], remaining_s: float | None = None) -> list[ProblemState]:
    """Un-park the problems still below the roofline threshold and not exhausted: their stall
    count restarts and they share ``remaining_s``.  With ``remaining_s`` None (no budget) only
    those that have not returned yet without finding anything."""
    eligible = [s for s in states if not s.exhausted and (remaining_s is not None or not s.returned)
                and (s.pct_roofline is None or s.pct_roofline < ROOFLINE_DONE)]
    if not eligible:
        return list(states)
    revived = [replace(s, returned=True, since_improvement=0) for s in eligible]
    revived = {s.name: s for s in assign_budgets(revived, remaining_s)}
    return [revived.get(s.name, s) for s in states]


def choose(states: list[ProblemState], remaining_s: float | None = None,
           in_flight: dict[str, int] | None = None) -> tuple[str | None, list[ProblemState]]:
    """``pick_next``; when everything is parked, ``return_to_headroom`` first.  Returns the
    choice (None: nothing left) and the possibly updated states."""
    name = pick_next(states, in_flight)
    if name is not None:
        return name, states
    revived = return_to_headroom(states, remaining_s)
    return pick_next(revived, in_flight), revived


def after_experiment(state: ProblemState, *, improved: bool, seconds: float,
                     pct_roofline: float | None = None, best_speedup: float | None = None,
                     exhausted: bool = False) -> ProblemState:
    """The state after one more experiment on the problem (or a proposal that found the space
    exhausted, with ``exhausted=True``)."""
    return replace(
        state,
        experiments=state.experiments + (0 if exhausted else 1),
        since_improvement=0 if improved else state.since_improvement + (0 if exhausted else 1),
        time_spent_s=state.time_spent_s + seconds,
        pct_roofline=pct_roofline if improved and pct_roofline is not None else state.pct_roofline,
        best_speedup=best_speedup if improved and best_speedup is not None else state.best_speedup,
        exhausted=state.exhausted or exhausted,
        returned=state.returned and not improved,
    )
