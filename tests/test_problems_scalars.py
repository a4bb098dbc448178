"""Non-tensor arguments (eps, scale) are drawn per input draw from what models use, the same for
the same seed; and they matter: a kernel that fixes them fails the comparison."""
from __future__ import annotations

import math

import pytest
import torch

from autokernel.harness import compare
from autokernel.harness.stages import upcast
from autokernel.problems import get_problem
from autokernel.problems.attention import scale_choices
from autokernel.problems.layernorm import EPS_CHOICES as LN_EPS
from autokernel.problems.layernorm import EPS_RANGE as LN_EPS_RANGE
from autokernel.problems.rmsnorm import EPS_CHOICES as RMS_EPS
from autokernel.problems.rmsnorm import EPS_RANGE as RMS_EPS_RANGE


@pytest.mark.parametrize("kind,index,choices", [("rmsnorm", 2, RMS_EPS), ("layernorm", 3, LN_EPS)])
def test_eps_walks_through_the_model_values_and_each_one_shows(kind, index, choices):
    problem = get_problem(kind)
    shape = {"M": 8, "N": 64}
    seeds = range(10, 10 + 2 * len(choices), 2)  # even seeds: the model values
    drawn = [problem.make_inputs(shape, torch.float32, "cpu", seed)[index] for seed in seeds]
    assert sorted(drawn) == sorted(choices)
    assert problem.make_inputs(shape, torch.float32, "cpu", 12)[index] == drawn[1]
    tol = problem.tolerance(torch.float32)
    for seed in seeds:
        args = problem.make_inputs(shape, torch.float32, "cpu", seed)
        ref = problem.reference(*upcast(args, torch.float64))
        for other in choices:
            if other == args[index]:
                continue
            fixed = problem.reference(*args[:index], other)
            assert not compare.compare_outputs(fixed, ref, compare.output_meta(fixed), tol).ok, (args[index], other)


@pytest.mark.parametrize("kind,index,choices,bounds", [("rmsnorm", 2, RMS_EPS, RMS_EPS_RANGE),
                                                        ("layernorm", 3, LN_EPS, LN_EPS_RANGE)])
def test_eps_is_drawn_from_a_range_too_and_a_value_snapped_to_the_model_ones_shows(kind, index, choices, bounds):
    """Odd seeds draw eps log-uniformly from a range: a kernel that snapped eps to the nearest of
    the model values (reading it as a flag) passed every stage while the draws were those values."""
    problem = get_problem(kind)
    shape = {"M": 8, "N": 64}
    drawn = [problem.make_inputs(shape, torch.float32, "cpu", seed)[index] for seed in range(1, 41, 2)]
    assert all(bounds[0] <= eps <= bounds[1] and eps not in choices for eps in drawn)
    assert len(set(drawn)) == len(drawn)
    assert drawn == [problem.make_inputs(shape, torch.float32, "cpu", seed)[index] for seed in range(1, 41, 2)]
    tol = problem.tolerance(torch.bfloat16)
    caught = 0
    for seed in range(1, 41, 2):
        args = problem.make_inputs(shape, torch.bfloat16, "cpu", seed)
        ref = problem.reference(*upcast(args, torch.float64))
        snapped = min(choices, key=lambda c: abs(math.log(c) - math.log(args[index])))
        out = problem.reference(*args[:index], snapped)
        caught += not compare.compare_outputs(out, ref, compare.output_meta(out), tol).ok
    assert caught >= 10  # of 20 draws: some fall near a model value, where snapping costs nothing


def test_attention_scale_is_default_explicit_or_not_the_default():
    """Even draws walk through None, 1/sqrt(D) and 1/D; odd draws take a scale near 1/sqrt(D) that
    is not it ([0.8, 1.25]/sqrt(D): a kernel that snapped such a scale to 1/sqrt(D) passed)."""
    problem = get_problem("attention")
    shape = {"B": 1, "H": 2, "Hkv": 1, "S": 8, "D": 16, "causal": 1}
    drawn = [problem.make_inputs(shape, torch.float32, "cpu", seed)[4] for seed in range(6)]
    assert sorted(drawn[0::2], key=str) == sorted(scale_choices(16), key=str) and None in drawn and 1 / 16 in drawn
    assert all(0.8 / 4 <= s <= 1.25 / 4 and s != 0.25 for s in drawn[1::2]) and len(set(drawn[1::2])) == 3
    tol = problem.tolerance(torch.float32)
    for seed in range(6):
        q, k, v, causal, scale = problem.make_inputs(shape, torch.float32, "cpu", seed)
        ref = problem.reference(q.double(), k.double(), v.double(), causal, scale)
        ignoring = problem.reference(q, k, v, causal)  # a kernel that always uses 1/sqrt(D)
        ok = compare.compare_outputs(ignoring, ref, compare.output_meta(ignoring), tol).ok
        assert ok == (scale is None or scale == 16 ** -0.5), scale


def test_embedding_scale_walks_through_the_model_values_and_draws_continuous_ones_that_show():
    from autokernel.problems.embedding import scale_choices, scale_range

    emb = get_problem("embedding")
    shape = {"M": 8, "V": 20, "N": 3072}
    for dtype in (torch.float32, torch.bfloat16):
        drawn = [emb.make_inputs(shape, dtype, "cpu", s)[2] for s in range(8)]
        assert drawn == [emb.make_inputs(shape, dtype, "cpu", s)[2] for s in range(8)]  # same seed, same scale
        assert set(drawn[0::2]) == set(scale_choices(3072, dtype))
        continuous = drawn[1::2]
        lo, hi = scale_range(3072)
        assert all(lo <= c <= hi and c not in scale_choices(3072, dtype) for c in continuous)
        assert len(set(continuous)) == len(continuous)
    # the dtype-rounded sqrt(N) that apply hands from a bf16 Gemma is among the bf16 draws
    assert 55.5 in scale_choices(3072, torch.bfloat16)
    # a kernel that reads the scale as a flag (sqrt(N) whenever not 1) fails the continuous draws
    shape = {"M": 8, "V": 20, "N": 16}
    tol = emb.tolerance(torch.float32)
    for seed in range(1, 9, 2):
        ids, weight, scale = emb.make_inputs(shape, torch.float32, "cpu", seed)
        ref = emb.reference(ids, weight.double(), scale)
        flag = emb.reference(ids, weight, 4.0)
        assert not compare.compare_outputs(flag, ref, compare.output_meta(flag), tol).ok, scale


def test_rotary_table_scaling_and_base_walk_through_model_values_and_continuous_ranges_and_show():
    from autokernel.problems.rotary_table import (BASE_CHOICES, BASE_RANGE, SCALING_CHOICES, SCALING_RANGE,
                                                  draw_scalars, inverse_frequencies)

    drawn = [draw_scalars(s) for s in range(12)]
    assert drawn == [draw_scalars(s) for s in range(12)]
    assert {b for b, _ in drawn[1::2]} == set(BASE_CHOICES)
    assert {c for _, c in drawn[0::2]} == set(SCALING_CHOICES)
    continuous_bases = [b for b, _ in drawn[0::2]]
    continuous_scalings = [c for _, c in drawn[1::2]]
    assert all(BASE_RANGE[0] <= b <= BASE_RANGE[1] and b not in BASE_CHOICES for b in continuous_bases)
    assert all(SCALING_RANGE[0] <= c <= SCALING_RANGE[1] and c not in SCALING_CHOICES for c in continuous_scalings)
    assert len(set(continuous_scalings)) == len(continuous_scalings)

    table = get_problem("rotary_table")
    shape = {"B": 2, "S": 6, "D": 16}
    tol = table.tolerance(torch.float32)
    for seed in range(6):
        pos, inv_freq, scaling, like = table.make_inputs(shape, torch.float32, "cpu", seed)
        ref = table.reference(pos, inv_freq.double(), scaling, like.double())
        fixed = [table.reference(pos, inv_freq, 1.0 if scaling == 1.0 else 0.75, like),  # scaling as a flag
                 table.reference(pos, inverse_frequencies(16, 10000.0, "cpu"), scaling, like)]  # a fixed base
        oks = [compare.compare_outputs(f, ref, compare.output_meta(f), tol).ok for f in fixed]
        assert oks == [scaling in (1.0, 0.75), bool(torch.equal(inv_freq, inverse_frequencies(16, 10000.0, "cpu")))]


def test_rotary_table_very_long_context_reaches_past_a_million_positions():
    table = get_problem("rotary_table")
    cases = dict(table.adversarial_inputs({"B": 2, "S": 5, "D": 8}, torch.float32, "cpu", 3))
    pos = cases["very-long-context"][0]
    assert int(pos.min()) >= 2 ** 20 and int(pos.max()) < 2 ** 24
