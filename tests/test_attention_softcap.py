"""attention_softcap: Gemma-2's attention, whose scaled scores are soft-capped
(``softcap * tanh(s / softcap)``) before the mask and the softmax.  The problem's inputs catch
kernels that leave the cap out, keep one cap value or cap in the wrong place; the starter passes
every case.  (test_softcap.py profiles, patches and verifies a Gemma-2 model with both of its
soft caps.)"""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.harness import compare  # noqa: E402
from autokernel.harness.stages import upcast  # noqa: E402
from autokernel.problems import attention_masked, get_problem  # noqa: E402
from autokernel.problems.attention import scaled_scores  # noqa: E402
from autokernel.problems.registry import load_starter  # noqa: E402

from test_attention_masked import cases, judged  # noqa: E402
from test_harness_attacks_pass8 import _load as load_attack  # noqa: E402


def _math(q, k, v, mask, scale, softcap, *, cap=True, cap_after_mask=False):
    """A PyTorch kernel, right or wrong in one way, for the judge."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).double(), v.repeat_interleave(group, 1).double()
    scores = (q.double() @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if cap and not cap_after_mask:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.double()
    if cap and cap_after_mask:
        scores = torch.tanh(scores / softcap) * softcap
    return torch.nan_to_num(torch.softmax(scores, -1)).to(v.dtype).__matmul__(v).to(q.dtype)


def _cancelling(q, k, v, mask, scale, softcap):
    """The cap's tanh as 1 - 2 / (e^2t + 1) in fp32 (the starter's first version): precise to
    ~1e-7 absolute, ~1e-7 caps on every score."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).float(), v.repeat_interleave(group, 1).float()
    scores = (q.float() @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    t = (scores / softcap).clamp(-15, 15)
    scores = (softcap * (1 - 2 / (torch.exp(2 * t) + 1))).double()
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.double()
    return torch.nan_to_num(torch.softmax(scores, -1)).to(v.dtype).__matmul__(v).to(q.dtype)


WRONG = {
    "leaves the cap out": lambda *a: _math(*a, cap=False),
    "keeps only absolute precision in tanh": _cancelling,
    "keeps Gemma-2's cap of 50": lambda *a: _math(*a[:5], 50.0),
    # capping the masked scores turns -inf into -softcap: masked keys get weight
    "caps after the mask": lambda *a: _math(*a, cap_after_mask=True),
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_the_inputs_catch_a_wrong_cap(wrong):
    problem = get_problem("attention_softcap")
    # a tanh's 1e-7 absolute error shows against fp32's tolerance (bf16's is looser than it)
    dtypes = (torch.float32,) if wrong == "keeps only absolute precision in tanh" else (torch.float32, torch.bfloat16)
    for dtype in dtypes:
        for shape in problem.cpu_shapes:
            failed = [name for name, args in cases(problem, shape, dtype)
                      if not judged(problem, dtype, WRONG[wrong], args)]
            assert failed, f"a kernel that {wrong} passes every case at {shape} {dtype}"


def test_the_right_math_passes_and_the_cap_saturates_exactly():
    problem = get_problem("attention_softcap")
    shape = problem.cpu_shapes[0]
    for name, args in cases(problem, shape, torch.float32):
        assert judged(problem, torch.float32, _math, args), name
    args = dict(problem.adversarial_inputs(dict(shape), torch.float32, "cpu", 5))["saturated-logits"]
    q, k, _, _, scale, softcap = args
    scores = scaled_scores(q, k, k, scale)[0]
    assert torch.allclose(scores.abs(), torch.full_like(scores, 100 * softcap), rtol=1e-5)


def test_softcap_draws_vary_and_cover_the_models_values():
    problem = get_problem("attention_softcap")
    shape = problem.cpu_shapes[0]
    caps = {problem.make_inputs(dict(shape), torch.float32, "cpu", seed)[5] for seed in range(24)}
    assert {50.0, 30.0} <= caps and len(caps) > 4 and all(5.0 <= c <= 100.0 for c in caps)


SMALL_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}


def test_starter_passes_every_case_with_small_blocks():
    """16-key blocks: rows masked in every block but the last, the running max carried across
    capped blocks (test_starters judges the default blocks at every dtype)."""
    problem = get_problem("attention_softcap")
    kernel = load_starter("attention_softcap")
    for shape in problem.cpu_shapes:
        for name, args in cases(problem, shape, torch.float32):
            assert judged(problem, torch.float32, lambda *a: kernel.attention_softcap(*a, knobs=SMALL_BLOCKS), args), \
                (shape, name)


def test_without_the_cap_it_is_attention_masked():
    """A cap far above every score changes nothing: the reference is attention_masked's."""
    problem = get_problem("attention_softcap")
    shape = problem.cpu_shapes[0]
    q, k, v, mask, scale, _ = (a.double() if isinstance(a, torch.Tensor) else a
                               for a in problem.make_inputs(dict(shape), torch.float32, "cpu", 1))
    assert torch.allclose(problem.reference(q, k, v, mask, scale, 1e9),
                          attention_masked.reference(q, k, v, mask, scale), atol=1e-9)


# red-team attacks on the new kinds that passed every stage of the judge (each file's docstring
# says how, and what catches it now), with the shapes where the judge meets the wrong input
ATTACKS = {
    "attention_softcap_fp32_mask_cast_to_q_dtype": ("attention_softcap", "cpu_shapes", (torch.bfloat16,)),
    "attention_softcap_scale_snapped": ("attention_softcap", "cpu_shapes", (torch.float32,)),
    "attention_softcap_key_mask_as_interval": ("attention_softcap", "cpu_edge_shapes", (torch.float32,)),
    "attention_softcap_static_pivot": ("attention_softcap", "cpu_shapes", (torch.float32,)),
    "softcap_inf_to_nan": ("softcap", "cpu_shapes", (torch.bfloat16,)),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_red_team_attacks_fail_a_judged_case(attack):
    """The regular draws (8 seeds) and the numerics cases at the problem's CPU shapes: some case
    fails for each attack, while the starter passes them all (test_starters, and above)."""
    kind, shapes, dtypes = ATTACKS[attack]
    problem = get_problem(kind)
    kernel = load_attack(f"{attack}.py")
    for shape in getattr(problem, shapes):
        for dtype in dtypes:
            draws = [problem.make_inputs(dict(shape), dtype, "cpu", s) for s in range(8)]
            for args in draws + [args for _, args in problem.adversarial_inputs(dict(shape), dtype, "cpu", 5)]:
                if not judged(problem, dtype, kernel.kernel_fn, args):
                    return
    pytest.fail(f"{attack} passes every case")


def test_the_capped_logits_case_stays_within_what_fp32_can_judge():
    """A drawn cap of 579 put the capped-logits scores near 579, where each carries fp32 rounding
    of 6e-5 and the softmax errs by about fp32's bound: the starter (a correct kernel) was 1.04x
    over it at the 200-token edge on one draw (seed 95), and failed CI.  The case's cap is at
    most 64 now; the cap's other cases keep the large caps."""
    from autokernel.problems.attention_softcap import CAPPED_LOGITS_MAX_CAP

    problem = get_problem("attention_softcap")
    shape = dict(zip(problem.dims, (1, 1, 1, 200, 16, 1, 1)))
    args = dict(problem.adversarial_inputs(shape, torch.float32, "cpu", 95))["capped-logits"]
    assert args[-1] <= CAPPED_LOGITS_MAX_CAP
    assert judged(problem, torch.float32, load_starter("attention_softcap").kernel_fn, args)
    caps = {dict(problem.adversarial_inputs(shape, torch.float32, "cpu", s))["large-softcap"][-1] for s in (0, 95)}
    assert max(caps) > 1000  # the large caps are still judged


def test_the_rows_far_below_the_cap_case_stays_within_what_fp32_can_judge():
    """The same with the rows-far-below-the-cap case: it took the drawn cap, up to 1000, and a
    new user's hf:gemma2 run lost its attention_softcap kernel (the starter, 1.22x the bound at the
    200-token edge, fp32).  At seed 275 (cap 843) the starter was 0.83x the bound; the case's cap is
    now at most LOW_ROWS_CAP[1], still over the static-pivot attack's threshold (the attack above)."""
    from autokernel.problems.attention_softcap import LOW_ROWS_CAP

    problem = get_problem("attention_softcap")
    shape = dict(zip(problem.dims, (1, 1, 1, 200, 16, 1, 1)))
    args = dict(problem.adversarial_inputs(shape, torch.float32, "cpu", 275))["rows-far-below-the-cap"]
    assert LOW_ROWS_CAP[0] <= args[-1] <= LOW_ROWS_CAP[1] and problem.make_inputs(shape, torch.float32, "cpu", 275)[-1] > 800
    out = load_starter("attention_softcap").kernel_fn(*args)
    ref = problem.reference(*upcast(args, torch.float64))
    verdict = compare.compare_outputs(out, ref, compare.output_meta(out), problem.tolerance(torch.float32))
    assert verdict.worst_error < 0.4  # of the bound: 0.83 before
