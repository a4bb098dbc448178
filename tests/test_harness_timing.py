"""timing.py statistics, roofline arithmetic, the GPU spec table and cached ceilings."""
from __future__ import annotations

import json
import math
import random

import pytest

from autokernel import hardware
from autokernel.harness import roofline, timing


def test_quantiles_median_spread():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert timing.median(xs) == 3.0
    assert timing.quantile(xs, 0.0) == 1.0 and timing.quantile(xs, 1.0) == 5.0
    assert timing.quantile(xs, 0.8) == pytest.approx(4.2)
    assert timing.spread(xs) == pytest.approx((4.2 - 1.8) / 2)
    assert math.isnan(timing.median([]))


def test_median_ignores_outliers_unlike_mean():
    xs = [10.0] * 9 + [1000.0]
    assert timing.median(xs) == 10.0


def test_weighted_score():
    assert timing.weighted_score([10.0, 20.0], [1.0, 3.0]) == 70.0


def test_compare_rounds_significance():
    inc = [100.0, 101.0, 99.0, 100.5, 100.0, 99.5]
    fast = [90.0, 91.0, 89.5, 90.0, 90.5, 90.0]
    c = timing.compare_rounds(fast, inc, 90.0, 100.0)
    assert c.significant and c.speedup == pytest.approx(100 / 90)
    same = timing.compare_rounds([99.8, 100.4, 100.0, 99.9, 100.1, 100.0], inc, 100.0, 100.0)
    assert not same.significant
    noisy = timing.compare_rounds([80.0, 120.0, 85.0, 115.0, 90.0, 110.0], inc, 97.0, 100.0)
    assert not noisy.significant and noisy.noise_frac > 0.05


def test_floor_and_roofline():
    # 1 GB at 1000 GB/s = 1000 us; 1 TFLOP at 100 TFLOP/s = 10000 us
    assert roofline.floor_us(1e9, 0, 1000.0, None) == pytest.approx(1000.0)
    assert roofline.floor_us(1e9, 1e12, 1000.0, 100.0) == pytest.approx(10000.0)
    ceil = hardware.Ceilings("X", 1000.0, {"bf16": 100.0, "fp16": 100.0, "fp32": 50.0})
    r = roofline.roofline(1e9, 0.0, 2000.0, ceil, "bf16")
    assert r.gbps == pytest.approx(500.0) and r.pct_roofline == pytest.approx(50.0) and r.tflops is None
    assert roofline.roofline(1e9, 0.0, 2000.0, None, "bf16") == roofline.NONE
    assert roofline.speedup(200.0, 100.0) == 2.0 and roofline.speedup(None, 1.0) is None


@pytest.mark.parametrize("name,expected", [
    ("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA B200", "B200"), ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"), ("NVIDIA A10", "A10"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 4080", "RTX 4080"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"), ("NVIDIA GeForce RTX 3080", "RTX 3080"),
    ("AMD Instinct MI300X", "MI300X"), ("AMD Instinct MI325X", "MI325X"), ("AMD Instinct MI350X", "MI350X"),
    ("AMD Instinct MI355X", "MI355X"),
])
def test_detect(name, expected):
    assert hardware.detect(name).name == expected


def test_unknown_device_and_cpu_have_no_ceilings(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path))
    assert hardware.detect("Some Future GPU") is None
    assert hardware.ceilings("cpu") is None
    assert hardware.ceilings("Some Future GPU") is None


def test_measured_ceilings_override_spec(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path))
    spec = hardware.ceilings("NVIDIA H200")
    assert spec.source == "spec" and spec.bandwidth_gbps == 4800
    (tmp_path / "ceilings.json").write_text(json.dumps(
        {"NVIDIA H200": {"bandwidth_gbps": 4200.0, "tflops": {"bf16": 700.0, "fp16": 700.0, "fp32": 350.0}}}))
    measured = hardware.ceilings("NVIDIA H200")
    assert measured.source == "measured" and measured.bandwidth_gbps == 4200.0
    assert measured.peak_tflops("bf16") == 700.0


def test_a_call_is_covered_only_when_the_host_finished_before_the_spin():
    from autokernel.harness.worker import host_covered

    assert host_covered(400.0, 500.0) and not host_covered(520.0, 500.0)


def test_each_call_sizes_the_next_spin_to_its_host_time_within_bounds():
    from autokernel.harness.worker import GPU_COVER_US_MAX, GPU_COVER_US_MIN, next_cover_cycles

    # 1M cycles spun for 500 us: 2000 cycles/us; 300 us of host time asks for 600 us
    assert next_cover_cycles(1_000_000, 500.0, 300.0) == 1_200_000
    # a call that compiled for 2 s asks for the most, not for 4 s; the next ordinary call shrinks it again
    big = next_cover_cycles(1_000_000, 500.0, 2e6)
    assert big == int(GPU_COVER_US_MAX * 2000)
    assert next_cover_cycles(big, GPU_COVER_US_MAX, 100.0) == int(200.0 * 2000)
    assert next_cover_cycles(1_000_000, 500.0, 1.0) == int(GPU_COVER_US_MIN * 2000)


@pytest.mark.parametrize("rounds", [3, 4, 5, 6, 7, 8])
def test_a_loss_decided_early_is_never_a_gain_whatever_the_later_rounds_measure(rounds):
    """The judge stops timing once ``loss_decided``: no completion of the rounds may then give a
    significant gain.  Adversarial completions (every later round far faster) and random ones."""
    rng = random.Random(rounds)
    decided = 0
    for _ in range(4000):
        need = timing.rounds_that_decide_a_loss(rounds)
        slow = [1.0 + rng.choice([0.0, rng.random() * 0.05]) for _ in range(need)]
        fast = [rng.choice([rng.uniform(0.3, 1.0), 0.99999, rng.uniform(0.9, 0.999)])
                for _ in range(rounds - need)]
        ratios = slow + fast
        rng.shuffle(ratios)
        prefix = []
        for r in ratios:  # the point where the judge would stop
            prefix.append(r)
            if timing.loss_decided(prefix, rounds):
                break
        assert timing.loss_decided(prefix, rounds)
        decided += 1
        inc = [100.0] * rounds
        cand = [100.0 * r for r in ratios]
        c = timing.compare_rounds(cand, inc, min(cand), 100.0)
        assert not c.significant, (ratios, c)
    assert decided == 4000
    # one round fewer than the rule asks for does not decide: the rest could still be a gain
    need = timing.rounds_that_decide_a_loss(rounds)
    assert not timing.loss_decided([1.0] * (need - 1) + [0.5] * (rounds - need), rounds)
    almost = [1.0] * (need - 1) + [0.9] * (rounds - need + 1)
    assert timing.compare_rounds([100 * r for r in almost], [100.0] * rounds, 90.0, 100.0).significant


def test_a_clear_loss_is_the_fastest_calls_slower_than_the_incumbents_median_by_the_margin():
    margin = timing.CLEAR_LOSS
    assert timing.clear_loss(100.0 * (1 + margin) + 0.01, 100.0)
    assert not timing.clear_loss(100.0 * (1 + margin), 100.0)  # at the margin: go on
    assert not timing.clear_loss(99.0, 100.0) and not timing.clear_loss(101.0, 100.0)
    assert not timing.clear_loss(1e9, 0.0)  # no incumbent time: nothing is clear


def test_one_slow_round_among_three_leaves_the_gain_undecided_and_six_settle_it():
    """The case that reverted a 5x faster kernel in the tuner's landscape test: one of the
    interpreter's three rounds held up by the machine (ratio 1.15), the 20-80 range then as
    wide as the gain.  Six rounds with the same one slow round keep it out of the range."""
    inc = [50.0, 50.0, 50.0]
    cand = [10.0, 57.5, 10.0]
    assert not timing.compare_rounds(cand, inc, 10.0, 50.0).significant
    assert timing.undecided(cand, inc)
    six = timing.compare_rounds(cand + [10.0, 10.0, 10.0], inc * 2, 10.0, 50.0)
    assert six.significant
    assert not timing.undecided([10.0] * 3, inc)  # settled: a gain
    assert not timing.undecided([50.0, 49.9, 50.2], inc)  # no gain to settle
    assert not timing.undecided([60.0, 20.0, 60.0], inc)  # the median says slower


def test_the_judge_times_more_rounds_where_the_planned_ones_leave_a_gain_undecided(monkeypatch, tmp_path):
    """``Evaluator._time`` with the worker calls replaced by scripted times: a candidate 5x faster
    than the incumbent in every round but the second (held up past the incumbent) was not
    significantly faster after the interpreter's three rounds; the judge now times three more
    and finds the gain.  A candidate as fast as the incumbent gets no more than three."""
    from types import SimpleNamespace

    import importlib

    evaluate_mod = importlib.import_module("autokernel.harness.evaluate")
    from autokernel.harness.records import Evaluation

    def timed(candidate_rounds: list[float]) -> tuple[Evaluation, list[int]]:
        ev_ = evaluate_mod.Evaluator("rmsnorm", device="cpu", shapes=["4x64"], baselines=False, prestart=False)
        rounds_seen = {"candidate": 0, "incumbent": 0}

        def batch(self, judge, runner, slot, shape, dtype, n, check_p, warm_up=False, numerics_p=0.0, judged=True,
                  rewrite_p=0.0):
            if warm_up:
                return [50000.0] * n, 0.05 * n
            r = rounds_seen[slot]
            rounds_seen[slot] += 1
            us = 50000.0 if slot == "incumbent" else candidate_rounds[min(r, len(candidate_rounds) - 1)]
            return [us] * n, us * n / 1e6

        monkeypatch.setattr(evaluate_mod.Evaluator, "_batch", batch)
        monkeypatch.setattr(evaluate_mod.Evaluator, "_incumbent_judge", lambda self, *a: SimpleNamespace(gpu=False))
        ev = Evaluation(problem="rmsnorm", kernel_file="k.py", correct=True, verdict="pass")
        ev_._time(ev, SimpleNamespace(gpu=False), tmp_path / "incumbent.py")
        return ev, [rounds_seen["candidate"], rounds_seen["incumbent"]]

    ev, rounds = timed([10000.0, 57500.0, 10000.0])
    assert rounds == [6, 6] and "left the gain undecided" in ev.message
    assert ev.vs_incumbent.significant and ev.vs_incumbent.median_ratio == pytest.approx(0.2)
    same, rounds = timed([50000.0])
    assert rounds[0] <= 3 and not same.vs_incumbent.significant and "undecided" not in same.message
