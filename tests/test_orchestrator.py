"""The orchestrator's arithmetic and choices (pure functions)."""
from __future__ import annotations

import pytest

from autokernel.orchestrator import (DEFAULT_SPEEDUP, PARK_AFTER, ProblemState, after_experiment, amdahl,
                                     assign_budgets, choose, current_fraction, estimated_speedup, expected_gain,
                                     park_reason, pick_next, return_to_headroom)


def test_amdahl():
    assert amdahl(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert amdahl(0.0, 10.0) == 1.0
    assert amdahl(1.0, 3.0) == pytest.approx(3.0)
    assert amdahl(0.25, 1.0) == 1.0
    with pytest.raises(ValueError):
        amdahl(0.5, 0.0)


def test_current_fraction_shrinks_with_speedup():
    assert current_fraction(0.5, 1.0) == pytest.approx(0.5)
    assert current_fraction(0.5, 2.0) == pytest.approx(1 / 3)
    assert current_fraction(0.0, 5.0) == 0.0


def test_estimated_speedup_from_headroom():
    assert estimated_speedup(None) == DEFAULT_SPEEDUP
    assert estimated_speedup(100.0) == 1.0
    assert estimated_speedup(25.0) > estimated_speedup(50.0) > estimated_speedup(80.0) > 1.0
    assert estimated_speedup(25.0) < 4.0  # damped: not the whole ideal 4x
    assert estimated_speedup(50.0, since_improvement=3) < estimated_speedup(50.0)


def test_pick_prefers_larger_share_and_more_headroom():
    big = ProblemState("matmul", fraction=0.6, pct_roofline=50.0)
    small = ProblemState("softmax", fraction=0.1, pct_roofline=20.0)
    assert pick_next([small, big]) == "matmul"
    # same share: the one further from its roofline
    a = ProblemState("a", fraction=0.3, pct_roofline=70.0)
    b = ProblemState("b", fraction=0.3, pct_roofline=30.0)
    assert pick_next([a, b]) == "b"
    # a problem that already got much faster matters less now
    fast = ProblemState("a", fraction=0.3, pct_roofline=30.0, best_speedup=3.0)
    assert pick_next([fast, b]) == "b"
    assert expected_gain(fast) < expected_gain(b)


def test_parking_rules():
    assert park_reason(ProblemState("a")) is None
    assert "roofline" in park_reason(ProblemState("a", pct_roofline=92.0))
    assert "without improvement" in park_reason(ProblemState("a", since_improvement=PARK_AFTER))
    assert park_reason(ProblemState("a", since_improvement=PARK_AFTER - 1)) is None
    assert "budget" in park_reason(ProblemState("a", time_spent_s=10.0, time_budget_s=10.0))
    assert "exhausted" in park_reason(ProblemState("a", exhausted=True))
    states = [ProblemState("a", fraction=0.9, pct_roofline=95.0), ProblemState("b", fraction=0.05, pct_roofline=10.0)]
    assert pick_next(states) == "b"  # the big one is at its roofline
    assert pick_next([ProblemState("a", exhausted=True)]) is None


def test_single_problem_without_roofline():
    s = ProblemState("only")
    assert pick_next([s]) == "only"
    for _ in range(PARK_AFTER):
        assert pick_next([s]) == "only"
        s = after_experiment(s, improved=False, seconds=1.0)
    assert pick_next([s]) is None
    name, states = choose([s])  # one return to a problem with headroom...
    assert name == "only" and states[0].returned and states[0].since_improvement == 0
    s = states[0]
    for _ in range(PARK_AFTER):
        s = after_experiment(s, improved=False, seconds=1.0)
    assert choose([s]) == (None, [s])  # ...only once when it found nothing


def test_with_time_left_a_stalled_problem_returns_until_its_space_is_exhausted():
    """A single `optimize --problem X --budget 10m` used to stop ("all-done") after two stalled
    stretches with most of the budget unused; with time left it goes on."""
    s = ProblemState("only", pct_roofline=70.0)
    for _ in range(4):
        for _ in range(PARK_AFTER):
            s = after_experiment(s, improved=False, seconds=1.0)
        name, (s,) = choose([s], remaining_s=100.0)
        assert name == "only" and s.since_improvement == 0
    s = after_experiment(s, improved=False, seconds=0.1, exhausted=True)
    assert choose([s], remaining_s=100.0)[0] is None
    at_roof = ProblemState("roof", pct_roofline=95.0, since_improvement=PARK_AFTER)
    assert choose([at_roof], remaining_s=100.0)[0] is None


def test_improving_return_stretch_earns_another():
    s = ProblemState("only", pct_roofline=40.0, since_improvement=PARK_AFTER)
    name, (s,) = choose([s])
    assert name == "only" and s.returned
    s = after_experiment(s, improved=True, seconds=1.0, pct_roofline=50.0, best_speedup=1.2)
    assert not s.returned
    for _ in range(PARK_AFTER):
        s = after_experiment(s, improved=False, seconds=1.0)
    name, (s,) = choose([s])
    assert name == "only"
    for _ in range(PARK_AFTER):
        s = after_experiment(s, improved=False, seconds=1.0)
    assert choose([s])[0] is None


def test_return_to_headroom_skips_done_problems():
    states = [ProblemState("roof", pct_roofline=95.0), ProblemState("stuck", pct_roofline=40.0, since_improvement=5),
              ProblemState("gone", exhausted=True, since_improvement=5),
              ProblemState("spent", pct_roofline=60.0, time_spent_s=50.0, time_budget_s=40.0)]
    assert pick_next(states) is None
    revived = return_to_headroom(states, remaining_s=100.0)
    by = {s.name: s for s in revived}
    assert not by["roof"].returned and not by["gone"].returned
    assert by["stuck"].returned and by["stuck"].since_improvement == 0
    assert by["spent"].time_budget_s > by["spent"].time_spent_s
    assert pick_next(revived) in ("stuck", "spent")


def test_after_experiment_tracks_improvement_and_time():
    s = ProblemState("a", pct_roofline=30.0)
    s = after_experiment(s, improved=False, seconds=2.0, pct_roofline=50.0, best_speedup=1.5)
    assert (s.experiments, s.since_improvement, s.time_spent_s, s.pct_roofline) == (1, 1, 2.0, 30.0)
    s = after_experiment(s, improved=True, seconds=3.0, pct_roofline=50.0, best_speedup=1.5)
    assert (s.experiments, s.since_improvement, s.time_spent_s, s.pct_roofline, s.best_speedup) == (2, 0, 5.0, 50.0, 1.5)
    s = after_experiment(s, improved=False, seconds=0.1, exhausted=True)
    assert s.exhausted and s.experiments == 2 and park_reason(s)


def test_budgets_follow_expected_gain_with_a_floor():
    states = [ProblemState("big", fraction=0.7, pct_roofline=20.0), ProblemState("tiny", fraction=0.01, pct_roofline=20.0)]
    out = assign_budgets(states, 1000.0)
    big, tiny = out
    assert big.time_budget_s > tiny.time_budget_s
    assert tiny.time_budget_s >= 0.5 * 1000.0 / 2  # the minimum share
    assert big.time_budget_s + tiny.time_budget_s == pytest.approx(1000.0)
    assert all(s.time_budget_s is None for s in assign_budgets(states, None))


def test_effort_spreads_by_amdahl_in_a_simulated_run():
    """Drive pick_next like the loop does: the big problem gets most experiments, the tiny one
    still gets some, everything ends."""
    states = [ProblemState("big", fraction=0.6, pct_roofline=30.0), ProblemState("mid", fraction=0.3, pct_roofline=30.0),
              ProblemState("tiny", fraction=0.02, pct_roofline=30.0)]
    counts = {s.name: 0 for s in states}
    for step in range(200):
        name, states = choose(states)
        if name is None:
            break
        counts[name] += 1
        i = next(i for i, s in enumerate(states) if s.name == name)
        improved = counts[name] % 3 == 0 and counts[name] < 9  # a few early wins per problem
        states[i] = after_experiment(states[i], improved=improved, seconds=1.0,
                                     pct_roofline=states[i].pct_roofline + 5 if improved else None,
                                     best_speedup=states[i].best_speedup * 1.1 if improved else None)
    else:
        pytest.fail("the orchestrator never stopped")
    assert counts["big"] >= counts["mid"] >= counts["tiny"] > 0
