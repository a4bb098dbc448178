"""attention_sinks: GPT-OSS's attention, whose softmax over each row's scores takes one more
logit per head (the sink) and drops its column.  The problem's inputs catch kernels that leave
the sinks out, read one head's sink for all, pivot their exponents on the sink or put it in the
wrong units; the starter passes every case.  (test_models_coverage profiles hf:gpt_oss;
test_integrate_sinks patches and verifies it.)"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.problems import attention_masked, get_problem  # noqa: E402
from autokernel.problems.registry import KERNELS_DIR, load_starter  # noqa: E402

from test_attention_masked import cases, judged  # noqa: E402
from test_harness_attacks_pass8 import _load as load_attack  # noqa: E402


def _math(q, k, v, mask, scale, sinks, *, sink_of=lambda sinks, h: sinks[h], pivot_on_sink=False,
          drop_sinks=False):
    """A PyTorch kernel, right or wrong in one way, for the judge."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).float(), v.repeat_interleave(group, 1).float()
    scores = (q.float() @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
    h = q.shape[1]
    sink = torch.stack([sink_of(sinks, i) for i in range(h)]).float().reshape(1, h, 1, 1)
    if drop_sinks:
        probs = torch.nan_to_num(torch.softmax(scores, -1))
    elif pivot_on_sink:  # no running max: exponents against the sink alone
        e = torch.exp(scores - sink)
        probs = e / (e.sum(-1, keepdim=True) + 1.0)
    else:
        probs = torch.cat([scores, sink.expand(*scores.shape[:3], 1)], -1).softmax(-1)[..., :-1]
    return (probs @ v).to(q.dtype)


WRONG = {
    "leaves the sinks out": lambda *a: _math(*a, drop_sinks=True),
    "reads the first head's sink for every head": lambda *a: _math(*a, sink_of=lambda s, h: s[0]),
    "pivots its exponents on the sink": lambda *a: _math(*a, pivot_on_sink=True),
    # a kernel in base-2 exponents (the attention starters' habit) that starts its max at the sink
    # in natural units
    "takes the sink in the wrong units": lambda *a: _math(*a, sink_of=lambda s, h: s[h] / 1.4426950408889634),
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_the_inputs_catch_a_wrong_sink(wrong):
    problem = get_problem("attention_sinks")
    for dtype in (torch.float32, torch.bfloat16):
        for shape in problem.cpu_shapes:
            failed = [name for name, args in cases(problem, shape, dtype)
                      if not judged(problem, dtype, WRONG[wrong], args)]
            assert failed, f"a kernel that {wrong} passes every case at {shape} {dtype}"


def test_the_right_math_passes_every_case():
    problem = get_problem("attention_sinks")
    for dtype in (torch.float32, torch.bfloat16):
        for name, args in cases(problem, problem.cpu_shapes[0], dtype):
            assert judged(problem, dtype, _math, args), (dtype, name)


def test_sink_draws_differ_by_head_and_by_draw():
    problem = get_problem("attention_sinks")
    shape = problem.cpu_shapes[0]
    draws = [problem.make_inputs(dict(shape), torch.float32, "cpu", seed)[5] for seed in range(6)]
    assert all(d.shape == (shape["H"],) and len(set(d.tolist())) == shape["H"] for d in draws)
    assert max(float(d.max()) for d in draws[1::2]) >= 30.0  # one head far above the scores on odd draws


SMALL_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}


def test_starter_passes_every_case_with_small_blocks():
    """16-key blocks: rows masked in every block but the last, the sink carried across blocks
    (test_starters judges the default blocks at every dtype)."""
    problem = get_problem("attention_sinks")
    kernel = load_starter("attention_sinks")
    for shape in problem.cpu_shapes:
        for name, args in cases(problem, shape, torch.float32):
            assert judged(problem, torch.float32, lambda *a: kernel.attention_sinks(*a, knobs=SMALL_BLOCKS), args), \
                (shape, name)


def test_sinks_far_below_are_attention_masked_and_dead_rows_are_zeros():
    problem = get_problem("attention_sinks")
    shape = dict(problem.cpu_shapes[0])
    q, k, v, mask, scale, _ = (a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                               for a in problem.make_inputs(shape, torch.float32, "cpu", 1))
    low = torch.full((shape["H"],), -1e4, dtype=torch.float64)
    assert torch.allclose(problem.reference(q, k, v, mask, scale, low), attention_masked.reference(q, k, v, mask, scale),
                          atol=1e-9)
    dead = torch.zeros_like(mask, dtype=torch.bool)
    out = problem.reference(q, k, v, dead, scale, torch.zeros(shape["H"], dtype=torch.float64))
    assert torch.equal(out, torch.zeros_like(out))


def test_eager_baseline_is_gpt_oss_math():
    """The timed eager baseline computes what the reference does (in the input dtype)."""
    problem = get_problem("attention_sinks")
    for name, args in cases(problem, problem.cpu_shapes[0], torch.float32):
        assert judged(problem, torch.float32, problem.eager, args), name


HF = importlib.util.find_spec("transformers") is not None
# every other layer slides a 4-key window over 12 tokens: the mask carries it
TINY_GPT_OSS = ("hidden_size=32,intermediate_size=24,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,"
                "head_dim=16,num_local_experts=4,num_experts_per_tok=2,vocab_size=128,sliding_window=4")


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_gpt_oss_attention_is_found_placed_and_verifies(tmp_path):
    """hf:gpt_oss runs transformers' eager attention with its sinks (``s_aux``) and a [B,1,S,S]
    additive mask: the plan has one attention_sinks problem for both layers (before: a matmul
    apply could not place and an unsupported softmax); the starter is applied after a probe of the
    function with the module's sinks, runs in each layer, and the model verifies."""
    from autokernel.integrate import OP_CALLS, apply
    from autokernel.integrate.calls import sink_eager_attention
    from autokernel.models import load_model
    from autokernel.plan import save_plan
    from autokernel.profiler import profile_model
    from autokernel.verify import verify

    loaded = load_model("hf:gpt_oss", config_overrides=TINY_GPT_OSS, input_shape=[2, 12])
    plan = profile_model(loaded, warmup=0, iters=1)
    sinks = [p for p in plan.problems if p.kind == "attention_sinks"]
    assert len(sinks) == 1 and sinks[0].supported, [(p.kind, p.note) for p in plan.problems]
    assert sinks[0].shapes == [{"B": 2, "H": 4, "Hkv": 2, "S": 12, "D": 16, "additive": 1, "per_query": 1}]
    assert sorted(sinks[0].modules) == ["model.model.layers.0.self_attn", "model.model.layers.1.self_attn"]
    assert not any(p.kind == "attention_masked" or p.kind in ("softmax", "matmul") and
                   any(m.endswith("self_attn") for m in p.modules) for p in plan.problems)
    attn = loaded.model.model.model.layers[0].self_attn
    assert sink_eager_attention(attn)

    plan.problems = sinks
    (tmp_path / "problems" / sinks[0].name).mkdir(parents=True)
    shutil.copyfile(KERNELS_DIR / "attention_sinks.py", tmp_path / "problems" / sinks[0].name / "kernel.py")
    save_plan(plan, tmp_path / "plan.json")
    (tmp_path / "run.json").write_text(json.dumps({"model": "hf:gpt_oss", "dtype": "fp32", "device": "cpu",
                                                   "input_shape": [2, 12], "config": TINY_GPT_OSS}))
    result = verify(tmp_path, seeds=(0, 1), timing=False, breakdown=False, log=lambda *_: None)
    assert result.passed, result
    patched = apply(loaded.model, tmp_path)
    op = patched._autokernel_ops[sinks[0].name]
    before = OP_CALLS[op]
    ids = loaded.make_inputs(3)
    with torch.no_grad():
        got, want = patched(*ids), loaded.model(*ids)
    assert OP_CALLS[op] - before == 2
    assert ((got - want).norm() / want.norm()).item() < 1e-5
    # sinks of another dtype than the op's: the model's own function
    with torch.no_grad():
        for layer in patched.model.model.layers:
            layer.self_attn.sinks.data = layer.self_attn.sinks.data.double()
        patched(*ids)
    assert OP_CALLS[op] - before == 2


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_eager_attention_without_sinks_is_not_sink_attention():
    from autokernel.integrate.calls import sink_eager_attention
    from autokernel.models import load_model

    gemma2 = load_model("hf:gemma2", config_overrides="hidden_size=64,num_hidden_layers=1,num_attention_heads=4,"
                        "num_key_value_heads=2,head_dim=16,intermediate_size=128,vocab_size=128,"
                        "attn_logit_softcapping=null", input_shape=[1, 8])
    assert not sink_eager_attention(gemma2.model.model.model.layers[0].self_attn)


MASK_ROW_OFFSETS = """
import sys, torch
from autokernel.problems import get_problem
from autokernel.problems.registry import load_starter
kind = sys.argv[1]
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 1, 3, 16, generator=gen) for _ in range(3))
row = 2 ** 30  # query row 2 of the mask starts 2^31 elements in
mask = torch.ones(2 * row + 3, dtype=torch.bool).as_strided((1, 1, 3, 3), (0, 0, row, 1))
extra = {"attention_masked": (), "attention_softcap": (50.0,), "attention_sinks": (torch.zeros(1),)}[kind]
out = load_starter(kind).kernel_fn(q, k, v, mask, None, *extra)
ref = get_problem(kind).reference(q.double(), k.double(), v.double(), mask, None,
                                  *(e.double() if isinstance(e, torch.Tensor) else e for e in extra))
assert (out.double() - ref).abs().max().item() < 1e-5
"""


@pytest.mark.parametrize("kind", ["attention_masked", "attention_softcap", "attention_sinks"])
def test_starters_reach_mask_rows_past_two_to_the_31(kind):
    """A [B, 1, S, S] mask past S = 46340 (GPT-OSS's context is 128k) puts query rows more than
    2^31 elements from the mask's start: the starters multiplied the row index by the row stride
    in int32, which wrapped (a read before the mask: a segfault under the interpreter).  A 2 GiB
    bool mask viewed with a 2^30 row stride reaches there with three rows."""
    import subprocess
    import sys

    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", MASK_ROW_OFFSETS, kind], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


# a red-team pass's kernels that passed every stage of the CPU judge (each file's docstring says
# how, and what catches them now)
ATTACKS = ["attention_sinks_bool_key_mask_batch0", "attention_sinks_dead_row_by_end_keys",
           "attention_sinks_low_sink_dropped", "attention_sinks_sink_in_every_block",
           "attention_sinks_tile_tail_rows_skip"]


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_red_team_attacks_fail_a_judged_case(attack):
    """Regular draws (4 seeds) and the numerics cases at the CPU and edge shapes, fp32: some case
    fails for each attack, while the starter passes them all (test_starters)."""
    problem = get_problem("attention_sinks")
    kernel = load_attack(f"{attack}.py")
    for shape in problem.cpu_edge_shapes[::-1] + problem.cpu_shapes:
        for name, args in [("random", problem.make_inputs(dict(shape), torch.float32, "cpu", s)) for s in range(4)] + \
                problem.adversarial_inputs(dict(shape), torch.float32, "cpu", 5):
            if not judged(problem, torch.float32, kernel.kernel_fn, args):
                return
    pytest.fail(f"{attack} passes every case")
