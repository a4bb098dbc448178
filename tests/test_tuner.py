"""The offline tuner: real textual edits; screen-then-propose with a stand-in screen
(deterministic, no processes); the unscreened path; determinism, no repeats, pruning, resume."""
from __future__ import annotations

import difflib
import sys
import json
from pathlib import Path

import pytest

from autokernel.agents import search, tuner
from autokernel.agents.base import Context
from autokernel.agents.screen import ScreenReport, ScreenResult
from autokernel.agents.tuner import EXHAUSTED, TunerAgent, apply_knobs, parse_knobs

SOURCE = '''"""A kernel."""
import math

KNOBS = {"BLOCK_N": 1024, "ROWS": 1,
         "num_warps": 4, "variant": "single_pass"}  # wrapped on purpose
KNOB_SPACE = {"BLOCK_N": [256, 512, 1024, 2048], "ROWS": [1, 2, 4], "num_warps": [2, 4, 8, 16],
              "variant": ["single_pass", "looped"]}


def kernel_fn(x):  # café: non-ASCII before nothing, after the literal
    return x * KNOBS["BLOCK_N"]
'''
SPACE_SIZE = 4 * 3 * 4 * 2


def latency(config) -> float:
    """A bowl around BLOCK_N=512, ROWS=1, num_warps=4 (one step from the start), and a faster
    optimum at BLOCK_N=2048, num_warps=16, looped that needs several knobs moved together."""
    if (config["BLOCK_N"], config["num_warps"], config["variant"]) == (2048, 16, "looped"):
        return 5.0
    return (10 + abs(config["BLOCK_N"].bit_length() - 10) * 3 + abs(config["ROWS"] - 1) * 2
            + abs(config["num_warps"].bit_length() - 3) * 2 + (0 if config["variant"] == "single_pass" else 2))


class FakeScreen:
    """Stands in for ``screen.run_screen``: 'times' each candidate with ``latency`` (relative to
    the incumbent), screening at most ``per_round`` of them; ``crash`` ones crash."""

    def __init__(self, per_round: int = 1000, crash=lambda c: False):
        self.per_round, self.crash, self.jobs = per_round, crash, []

    def __call__(self, job):
        self.jobs.append(job)
        inc = latency(parse_knobs(job.incumbent_source).knobs)
        report = ScreenReport(incumbent=ScreenResult("ok", 1.0, inc), wall_s=1.0, startup_s=0.5)
        for key, source in job.candidates[:self.per_round]:
            config = parse_knobs(source).knobs
            if self.crash(config):
                report.results[key] = ScreenResult("crash", message="died")
            else:
                report.results[key] = ScreenResult("ok", latency(config) / inc, latency(config), rung=1)
        ranked = sorted((k for k, r in report.results.items() if r.status == "ok"),
                        key=lambda k: report.results[k].ratio)
        report.finalists = ranked[:search.FINALISTS]
        return report


def drive(tmp_path: Path, seed: int, steps: int, *, screen: bool, crash=lambda c: False, fake=None,
          time_left=None, source: str = SOURCE, log: str | None = None):
    """Run the tuner as the loop would: the judge keeps strictly faster configurations."""
    agent = TunerAgent(seed=seed, screen=screen)
    best, history, proposals = source, [], []
    best_us = latency(parse_knobs(best).knobs)
    for exp in range(1, steps + 1):
        ctx = Context(problem=object(), problem_spec="x", problem_dir=tmp_path, kernel_path=tmp_path / "kernel.py",
                      best_source=best, best=None, start=None, history=list(history), last_failure=None,
                      experiment=exp, device="cpu", seed=seed,
                      extra={"log_dir": str(tmp_path / (log or f"logs{seed}")), "time_left_s": time_left})
        p = agent.propose(ctx)
        if p.source is None:
            proposals.append(None)
            assert p.rejected_reason.startswith(EXHAUSTED)
            break
        config = parse_knobs(p.source).knobs
        proposals.append((p.description, config))
        if crash(config):
            status, us = "crash", ""
        else:
            us = latency(config)
            status = "keep" if us < best_us else "revert"
            if status == "keep":
                best, best_us = p.source, us
        history.append({"experiment": str(exp), "agent": "tuner", "status": status, "latency_us": str(us),
                        "description": p.description, "wall_s": "2.0"})
    return proposals, best


def key(config) -> str:
    return repr(sorted(config.items()))


# --------------------------------------------------------------------------- editing
def test_parse_and_edit_is_minimal_textual_change():
    decl = parse_knobs(SOURCE)
    assert decl.knobs == {"BLOCK_N": 1024, "ROWS": 1, "num_warps": 4, "variant": "single_pass"}
    assert decl.space["num_warps"] == [2, 4, 8, 16]
    new = apply_knobs(SOURCE, decl, {**decl.knobs, "num_warps": 8, "variant": "looped"})
    diff = [l for l in difflib.unified_diff(SOURCE.splitlines(), new.splitlines(), lineterm="", n=0)
            if l.startswith(("+", "-")) and not l.startswith(("+++", "---"))]
    assert diff == ['-         "num_warps": 4, "variant": "single_pass"}  # wrapped on purpose',
                    '+         "num_warps": 8, "variant": "looped"}  # wrapped on purpose']
    assert parse_knobs(new).knobs["variant"] == "looped"


def test_no_knobs_means_exhausted(tmp_path):
    ctx = Context(problem=None, problem_spec="x", problem_dir=tmp_path, kernel_path=tmp_path / "k.py",
                  best_source="def kernel_fn(x):\n    return x\n", best=None, start=None, history=[],
                  last_failure=None, experiment=1, device="cpu")
    p = TunerAgent(0).propose(ctx)
    assert p.source is None and p.rejected_reason.startswith(EXHAUSTED)


# --------------------------------------------------------------------------- screen, then propose
def test_screened_search_finds_the_optimum_coordinate_descent_misses(tmp_path, monkeypatch):
    fake = FakeScreen()
    monkeypatch.setattr(tuner, "run_screen", fake)
    proposals, best = drive(tmp_path, seed=1, steps=30, screen=True)
    assert latency(parse_knobs(best).knobs) == 5.0  # the optimum three knobs away
    assert "screened 1st of" in proposals[0][0] and "round 1" in proposals[0][0]
    assert parse_knobs(apply_knobs(SOURCE, parse_knobs(SOURCE), proposals[0][1])).knobs == proposals[0][1]
    assert proposals[-1] is None  # everything screened, nothing left faster: exhausted
    assert len(proposals) <= 3  # only finalists faster than the incumbent were proposed
    assert len(fake.jobs) == 1  # a space this small is swept in one round
    assert len(fake.jobs[0].candidates) == SPACE_SIZE - 1  # everything but the incumbent
    state = json.loads((tmp_path / "logs1" / "tuner_state.json").read_text())
    assert len(state["screened"]) == SPACE_SIZE - 1
    assert (tmp_path / "logs1" / "tuner_screen.jsonl").read_text().count("\n") == 1


def test_only_finalists_faster_than_the_incumbent_are_proposed(tmp_path, monkeypatch):
    fake = FakeScreen()
    monkeypatch.setattr(tuner, "run_screen", fake)
    optimum = {"BLOCK_N": 2048, "ROWS": 1, "num_warps": 16, "variant": "looped"}
    start = apply_knobs(SOURCE, parse_knobs(SOURCE), optimum)  # already the best
    proposals, _ = drive(tmp_path, seed=2, steps=10, screen=True, source=start)
    assert proposals == [None]


def test_sweep_rounds_respect_the_screen_capacity_and_never_repeat(tmp_path, monkeypatch):
    fake = FakeScreen(per_round=10)
    monkeypatch.setattr(tuner, "run_screen", fake)
    proposals, best = drive(tmp_path, seed=3, steps=60, screen=True)
    assert latency(parse_knobs(best).knobs) == 5.0
    assert proposals[-1] is None
    screened = [k for job in fake.jobs for k, _ in job.candidates[:10]]
    assert len(screened) == len(set(screened))  # no configuration screened twice
    configs = [key(c) for p in proposals if p for c in [p[1]]]
    assert len(configs) == len(set(configs))
    # nearest first: the first round holds only configurations one or two knobs from the start
    start = parse_knobs(SOURCE).knobs
    first = [parse_knobs(s).knobs for _, s in fake.jobs[0].candidates[:10]]
    assert max(search.distance(c, start) for c in first) <= 2


def test_deterministic_for_a_seed(tmp_path, monkeypatch):
    monkeypatch.setattr(tuner, "run_screen", FakeScreen(per_round=12))
    a, _ = drive(tmp_path / "a", seed=7, steps=40, screen=True)
    b, _ = drive(tmp_path / "b", seed=7, steps=40, screen=True)
    c, _ = drive(tmp_path / "c", seed=8, steps=40, screen=True)
    assert a == b
    assert a != c


def test_screen_crashes_prune_dominating_configurations(tmp_path, monkeypatch):
    crash = lambda c: c["BLOCK_N"] >= 1024 and c["num_warps"] >= 8 and c["variant"] == "single_pass"
    fake = FakeScreen(per_round=12, crash=crash)
    monkeypatch.setattr(tuner, "run_screen", fake)
    drive(tmp_path, seed=4, steps=60, screen=True)
    space = parse_knobs(SOURCE).space
    crashed = []  # in earlier rounds (a round's configurations are chosen before it runs)
    for job in fake.jobs:
        configs = [parse_knobs(source).knobs for _, source in job.candidates[:12]]
        for config in configs:
            assert not any(search.dominates(config, f, space) for f in crashed)
        crashed += [c for c in configs if crash(c)]
    assert crashed and len(fake.jobs) > 2


def test_no_time_to_screen_proposes_unscreened(tmp_path, monkeypatch):
    fake = FakeScreen()
    monkeypatch.setattr(tuner, "run_screen", fake)
    proposals, _ = drive(tmp_path, seed=5, steps=3, screen=True, time_left=10.0)
    assert not fake.jobs
    assert all("unscreened" in p[0] and "no time left" in p[0] for p in proposals)


def test_a_resumed_run_proposes_from_the_saved_queue(tmp_path, monkeypatch):
    fake = FakeScreen()
    monkeypatch.setattr(tuner, "run_screen", fake)

    def context(experiment, history):
        return Context(problem=object(), problem_spec="x", problem_dir=tmp_path, kernel_path=tmp_path / "k.py",
                       best_source=SOURCE, best=None, start=None, history=history, last_failure=None,
                       experiment=experiment, device="cpu", extra={"log_dir": str(tmp_path / "logs")})

    first = TunerAgent(seed=6, screen=True).propose(context(1, []))
    history = [{"experiment": "1", "agent": "tuner", "status": "revert", "latency_us": "9.0",
                "description": first.description, "wall_s": "2.0"}]
    # a new agent instance, as in a resumed run: the finalists come from the saved state
    second = TunerAgent(seed=6, screen=True).propose(context(2, history))
    assert len(fake.jobs) == 1
    assert "screened 1st of" in first.description and "screened 2nd of" in second.description
    assert parse_knobs(second.source).knobs != parse_knobs(first.source).knobs


# --------------------------------------------------------------------------- unscreened
def test_unscreened_is_deterministic_never_repeats_and_exhausts(tmp_path):
    a, _ = drive(tmp_path / "a", seed=7, steps=200, screen=False)
    b, _ = drive(tmp_path / "b", seed=7, steps=200, screen=False)
    assert a == b
    assert a[-1] is None and len(a) - 1 == SPACE_SIZE - 1  # every configuration once, then exhausted
    configs = [key(c) for p in a if p for c in [p[1]]]
    assert len(configs) == len(set(configs)) and key(parse_knobs(SOURCE).knobs) not in configs
    assert all("unscreened" in p[0] for p in a if p)


def test_unscreened_crashes_prune_larger_configs(tmp_path):
    crash = lambda c: c["BLOCK_N"] >= 2048 and c["num_warps"] >= 16
    proposals, _ = drive(tmp_path, seed=2, steps=200, screen=False, crash=crash)
    tried = [p[1] for p in proposals if p]
    space = parse_knobs(SOURCE).space
    assert any(crash(c) for c in tried)
    for i, c in enumerate(tried):
        assert not any(search.dominates(c, f, space) for f in tried[:i] if crash(f))
    assert len(tried) < SPACE_SIZE - 1


def test_state_survives_a_new_agent_instance(tmp_path):
    first, _ = drive(tmp_path, seed=4, steps=6, screen=False)
    agent = TunerAgent(seed=4, screen=False)
    tried = {key(c) for _, c in first}
    ctx = Context(problem=None, problem_spec="x", problem_dir=tmp_path, kernel_path=tmp_path / "k.py",
                  best_source=SOURCE, best=None, start=None, history=[], last_failure=None, experiment=7,
                  device="cpu", extra={"log_dir": str(tmp_path / "logs4")})
    p = agent.propose(ctx)
    assert key(parse_knobs(p.source).knobs) not in tried


def test_a_broken_screen_falls_back_to_unscreened(tmp_path, monkeypatch):
    calls = []

    def broken(job):
        calls.append(job)
        return ScreenReport(error="screen setup failed: ProblemError: nope")

    monkeypatch.setattr(tuner, "run_screen", broken)
    proposals, _ = drive(tmp_path, seed=1, steps=3, screen=True)
    assert len(calls) == 1  # not retried on every proposal
    assert all("unscreened" in p[0] and "screen failed" in p[0] for p in proposals)


@pytest.mark.parametrize("left,judge,expected", [(None, 5.0, search.MAX_SCREEN_S), (100.0, 10.0, 40.0),
                                                 (1000.0, 5.0, search.MAX_SCREEN_S), (20.0, 5.0, 0.0)])
def test_screen_allowance(left, judge, expected):
    assert search.screen_allowance(left, judge) == pytest.approx(expected)


def test_the_screen_gets_half_the_time_left_minus_one_judged_evaluation(tmp_path, monkeypatch):
    fake = FakeScreen()
    monkeypatch.setattr(tuner, "run_screen", fake)
    baseline = {"experiment": "0", "agent": "tuner", "status": "baseline", "latency_us": "13", "wall_s": "40.0",
                "description": "starting kernel"}
    ctx = Context(problem=object(), problem_spec="x", problem_dir=tmp_path, kernel_path=tmp_path / "k.py",
                  best_source=SOURCE, best=None, start=None, history=[baseline], last_failure=None, experiment=1,
                  device="cpu", extra={"log_dir": str(tmp_path / "logs"), "time_left_s": 100.0})
    p = TunerAgent(seed=0, screen=True).propose(ctx)
    assert "screened 1st" in p.description
    # the baseline also timed eager and torch.compile and started the worker: a judged
    # candidate is taken to cost half of it (20 s), so the round gets 0.5 * 100 - 20 s
    assert fake.jobs[0].time_limit_s == pytest.approx(30.0, abs=0.5)


def test_a_judged_crash_is_recognised_even_with_a_long_description(tmp_path):
    agent = TunerAgent(seed=0, screen=False)
    ctx = lambda exp, history: Context(problem=None, problem_spec="x", problem_dir=tmp_path,
                                       kernel_path=tmp_path / "k.py", best_source=SOURCE, best=None, start=None,
                                       history=history, last_failure=None, experiment=exp, device="cpu",
                                       extra={"log_dir": str(tmp_path / "logs")})
    first = agent.propose(ctx(1, []))
    crashed = parse_knobs(first.source).knobs
    state_path = tmp_path / "logs" / "tuner_state.json"
    state = json.loads(state_path.read_text())
    state["proposals"]["1"]["description"] += " (a long note)" * 40  # over results.tsv's 300 characters
    state_path.write_text(json.dumps(state))
    row = {"experiment": "1", "agent": "tuner", "status": "crash", "latency_us": "", "wall_s": "1.0",
           "description": state["proposals"]["1"]["description"][:300]}
    space = parse_knobs(SOURCE).space
    history = [row]
    for exp in range(2, 30):  # nothing that dominates the crashed configuration comes back
        p = agent.propose(ctx(exp, history))
        config = parse_knobs(p.source).knobs
        assert not search.dominates(config, crashed, space)
        history.append({"experiment": str(exp), "agent": "tuner", "status": "revert", "latency_us": "20",
                        "wall_s": "1.0", "description": p.description})


def test_time_left_is_the_sooner_of_the_run_deadline_and_the_problem_budget():
    import time

    from autokernel.loop.optimize import time_left
    from autokernel.orchestrator import ProblemState

    now = time.monotonic()
    assert time_left(None, None) is None
    assert time_left(ProblemState("p"), now + 100) == pytest.approx(100, abs=1)
    assert time_left(ProblemState("p", time_budget_s=50, time_spent_s=20), now + 100) == pytest.approx(30)
    assert time_left(ProblemState("p", time_budget_s=50, time_spent_s=20), None) == pytest.approx(30)
    assert time_left(ProblemState("p", time_budget_s=500), now + 100) == pytest.approx(100, abs=1)
    assert time_left(ProblemState("p"), now - 5) == 0.0


def test_near_the_deadline_with_nothing_screened_faster_the_tuner_stops(tmp_path, monkeypatch):
    """On the H200 a 5-minute --budget ran 6m12s: the screen found nothing faster than the
    incumbent, the rounds ran out of time, and the tuner then proposed a configuration it never
    timed, whose judged evaluation ran 72 s past the deadline (and lost).  Now it stops."""
    clock = [1000.0]
    monkeypatch.setattr(tuner.time, "monotonic", lambda: clock[0])

    class SlowFakeScreen(FakeScreen):
        def __call__(self, job):
            clock[0] += job.time_limit_s  # each round uses its whole allowance
            return super().__call__(job)

    fake = SlowFakeScreen(per_round=4)
    monkeypatch.setattr(tuner, "run_screen", fake)
    optimum = SOURCE.replace('"BLOCK_N": 1024', '"BLOCK_N": 512')  # the bowl's bottom near the start
    monkeypatch.setattr(sys.modules[__name__], "latency", lambda c: 10.0 if c["BLOCK_N"] == 512 else 20.0)
    proposals, _ = drive(tmp_path, seed=3, steps=2, screen=True, time_left=60.0, source=optimum)
    assert fake.jobs, "it screened while there was time"
    assert proposals == [None], proposals
    # with no screen evidence and no time, it still proposes unscreened (the loop stays alive)
    proposals, _ = drive(tmp_path, seed=4, steps=1, screen=True, time_left=10.0, source=optimum, log="fresh")
    assert proposals and proposals[0] is not None and "unscreened" in proposals[0][0]
