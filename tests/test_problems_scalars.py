"""Non-tensor arguments (eps, scale) are drawn per input draw from what models use, the same for
the same seed; and they matter: a kernel that fixes them fails the comparison."""
from __future__ import annotations

import pytest
import torch

from autokernel.harness import compare
from autokernel.harness.stages import upcast
from autokernel.problems import get_problem
from autokernel.problems.attention import scale_choices
from autokernel.problems.layernorm import EPS_CHOICES as LN_EPS
from autokernel.problems.rmsnorm import EPS_CHOICES as RMS_EPS


@pytest.mark.parametrize("kind,index,choices", [("rmsnorm", 2, RMS_EPS), ("layernorm", 3, LN_EPS)])
def test_eps_walks_through_the_model_values_and_each_one_shows(kind, index, choices):
    problem = get_problem(kind)
    shape = {"M": 8, "N": 64}
    drawn = [problem.make_inputs(shape, torch.float32, "cpu", seed)[index] for seed in range(10, 10 + len(choices))]
    assert sorted(drawn) == sorted(choices)
    assert problem.make_inputs(shape, torch.float32, "cpu", 11)[index] == drawn[1]
    tol = problem.tolerance(torch.float32)
    for seed in range(10, 10 + len(choices)):
        args = problem.make_inputs(shape, torch.float32, "cpu", seed)
        ref = problem.reference(*upcast(args, torch.float64))
        for other in choices:
            if other == args[index]:
                continue
            fixed = problem.reference(*args[:index], other)
            assert not compare.compare_outputs(fixed, ref, compare.output_meta(fixed), tol).ok, (args[index], other)


def test_attention_scale_is_default_explicit_or_not_the_default():
    problem = get_problem("attention")
    shape = {"B": 1, "H": 2, "Hkv": 1, "S": 8, "D": 16, "causal": 1}
    drawn = [problem.make_inputs(shape, torch.float32, "cpu", seed)[4] for seed in range(3)]
    assert sorted(drawn, key=str) == sorted(scale_choices(16), key=str) and None in drawn and 1 / 16 in drawn
    tol = problem.tolerance(torch.float32)
    for seed in range(3):
        q, k, v, causal, scale = problem.make_inputs(shape, torch.float32, "cpu", seed)
        ref = problem.reference(q.double(), k.double(), v.double(), causal, scale)
        ignoring = problem.reference(q, k, v, causal)  # a kernel that always uses 1/sqrt(D)
        ok = compare.compare_outputs(ignoring, ref, compare.output_meta(ignoring), tol).ok
        assert ok == (scale is None or scale == 16 ** -0.5)


def test_embedding_scale_and_rotary_table_scaling_and_base_walk_through_their_choices_and_show():
    from autokernel.problems.embedding import scale_choices as embedding_scales
    from autokernel.problems.rotary_table import BASE_CHOICES, SCALING_CHOICES, inverse_frequencies

    emb = get_problem("embedding")
    shape = {"M": 8, "V": 20, "N": 16}
    assert sorted({emb.make_inputs(shape, torch.float32, "cpu", s)[2] for s in range(4)}) == sorted(embedding_scales(16))
    table = get_problem("rotary_table")
    shape = {"B": 2, "S": 6, "D": 16}
    drawn = [table.make_inputs(shape, torch.float32, "cpu", s) for s in range(4)]
    assert {d[2] for d in drawn} == set(SCALING_CHOICES)
    assert {round(float(1 / d[1][1]), 3) for d in drawn} == {round(float(1 / inverse_frequencies(16, b, "cpu")[1]), 3)
                                                              for b in BASE_CHOICES}
    tol = table.tolerance(torch.float32)
    for pos, inv_freq, scaling, like in drawn:
        ref = table.reference(pos, inv_freq.double(), scaling, like.double())
        fixed = [table.reference(pos, inv_freq, 1.0, like),  # a kernel that ignores the scaling
                 table.reference(pos, inverse_frequencies(16, 10000.0, "cpu"), scaling, like)]  # or fixes the base
        oks = [compare.compare_outputs(f, ref, compare.output_meta(f), tol).ok for f in fixed]
        assert oks == [scaling == 1.0, bool(torch.equal(inv_freq, inverse_frequencies(16, 10000.0, "cpu")))]
