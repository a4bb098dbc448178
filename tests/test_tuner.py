"""The offline tuner: real textual edits, coordinate descent, determinism, no repeats, pruning."""
from __future__ import annotations

import difflib
from pathlib import Path

from autokernel.agents.base import Context
from autokernel.agents.tuner import EXHAUSTED, TunerAgent, apply_knobs, dominates, neighbours, parse_knobs

SOURCE = '''"""A kernel."""
import math

KNOBS = {"BLOCK_N": 1024, "ROWS": 1,
         "num_warps": 4, "variant": "single_pass"}  # wrapped on purpose
KNOB_SPACE = {"BLOCK_N": [256, 512, 1024, 2048], "ROWS": [1, 2, 4], "num_warps": [2, 4, 8, 16],
              "variant": ["single_pass", "looped"]}


def kernel_fn(x):  # café: non-ASCII before nothing, after the literal
    return x * KNOBS["BLOCK_N"]
'''


def latency(config) -> float:
    """A made-up landscape with one optimum at BLOCK_N=256, ROWS=4, num_warps=8, looped."""
    return (abs(config["BLOCK_N"].bit_length() - 9) * 3 + abs(config["ROWS"] - 4) * 2
            + abs(config["num_warps"].bit_length() - 4) * 2 + (0 if config["variant"] == "looped" else 2) + 10)


def drive(tmp_path: Path, seed: int, steps: int, source: str = SOURCE, crash=lambda c: False):
    """Run the tuner against ``latency`` as the loop would: keep strictly faster configs."""
    agent = TunerAgent(seed=seed)
    best, history, proposals = source, [], []
    best_us = latency(parse_knobs(best).knobs)
    for exp in range(1, steps + 1):
        ctx = Context(problem=None, problem_spec="x", problem_dir=tmp_path, kernel_path=tmp_path / "kernel.py",
                      best_source=best, best=None, start=None, history=list(history), last_failure=None,
                      experiment=exp, device="cpu", seed=seed, extra={"log_dir": str(tmp_path / f"logs{seed}")})
        p = agent.propose(ctx)
        if p.source is None:
            proposals.append(None)
            assert p.rejected_reason == EXHAUSTED
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
                        "description": p.description})
    return proposals, best


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


def test_neighbours_are_one_knob_away_in_descent_order():
    space = parse_knobs(SOURCE).space
    center = {"BLOCK_N": 1024, "ROWS": 1, "num_warps": 4, "variant": "single_pass"}
    moves = [m for _, m in neighbours(center, space)]
    assert moves[:3] == [("BLOCK_N", 1), ("BLOCK_N", -1), ("ROWS", 1)]
    for config, (knob, _) in neighbours(center, space):
        assert [k for k in center if center[k] != config[k]] == [knob]
    # continuing along the last improving move comes first
    assert neighbours(center, space, ("num_warps", -1))[0][1] == ("num_warps", -1)


def test_deterministic_for_a_seed_and_never_repeats(tmp_path):
    a, _ = drive(tmp_path, seed=7, steps=40)
    b, _ = drive(tmp_path / "again", seed=7, steps=40)
    assert a == b
    configs = [repr(sorted(c.items())) for _, c in a]
    assert len(configs) == len(set(configs))
    start = repr(sorted(parse_knobs(SOURCE).knobs.items()))
    assert start not in configs
    c, _ = drive(tmp_path / "other", seed=8, steps=40)
    assert c[:3] == a[:3]  # descent from the same incumbent does not depend on the seed...
    assert c != a  # ...the restarts do


def test_descent_finds_the_optimum_and_exhausts(tmp_path):
    proposals, best = drive(tmp_path, seed=1, steps=200)
    assert latency(parse_knobs(best).knobs) == 10  # the global optimum of the landscape
    assert proposals[-1] is None  # exhausted: every configuration visited once
    assert len(proposals) - 1 == 4 * 3 * 4 * 2 - 1
    # coordinate descent reaches the optimum quickly, long before a full enumeration
    first_opt = next(i for i, p in enumerate(proposals) if latency(p[1]) == 10)
    assert first_opt < 15


def test_crashes_prune_larger_configs(tmp_path):
    crash = lambda c: c["BLOCK_N"] >= 2048 and c["num_warps"] >= 16
    proposals, _ = drive(tmp_path, seed=2, steps=200, crash=crash)
    tried = [c for p in proposals if p for c in [p[1]]]
    crashed = [c for c in tried if crash(c)]
    assert crashed  # it did find the failing region...
    space = parse_knobs(SOURCE).space
    for i, c in enumerate(tried):  # ...and never proposed a config dominating an earlier crash
        assert not any(dominates(c, f, space) for f in tried[:i] if crash(f))
    assert len(tried) < 4 * 3 * 4 * 2 - 1


def test_dominates_compares_size_knobs_only_within_same_variant():
    space = parse_knobs(SOURCE).space
    failed = {"BLOCK_N": 2048, "ROWS": 1, "num_warps": 16, "variant": "looped"}
    assert dominates({**failed, "ROWS": 2}, failed, space)
    assert not dominates({**failed, "num_warps": 8}, failed, space)
    assert not dominates({**failed, "variant": "single_pass"}, failed, space)


def test_state_survives_a_new_agent_instance(tmp_path):
    first, _ = drive(tmp_path, seed=4, steps=6)
    # the loop restarts (resume): a fresh TunerAgent reads its memory from the log dir
    agent = TunerAgent(seed=4)
    tried = {repr(sorted(c.items())) for _, c in first}
    ctx = Context(problem=None, problem_spec="x", problem_dir=tmp_path, kernel_path=tmp_path / "k.py",
                  best_source=SOURCE, best=None, start=None, history=[], last_failure=None, experiment=7,
                  device="cpu", extra={"log_dir": str(tmp_path / "logs4")})
    p = agent.propose(ctx)
    assert repr(sorted(parse_knobs(p.source).knobs.items())) not in tried
