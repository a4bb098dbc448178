"""xielu (Apertus' xIELU activation), on CPU under the Triton interpreter: the starter and the
module's own forward (transformers' ``XIELUActivation``, fp32 and bf16: its expm1 and its eps
clamp) against the fp64 reference; the judge's inputs catching a kernel that ignores eps or fixes
the numbers; the scalars drawn from continuous ranges; the bytes; and hf:apertus planned and
placed, the op handed the module's own softplus'd numbers, the patched model matching the
original and following a change of the parameters."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from torch import nn

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.harness import compare  # noqa: E402
from autokernel.harness.stages import upcast  # noqa: E402
from autokernel.integrate import OP_CALLS, apply  # noqa: E402
from autokernel.plan import PlanProblem  # noqa: E402
from autokernel.problems import get_problem  # noqa: E402
from autokernel.problems.base import dtype_name  # noqa: E402
from autokernel.problems.registry import load_starter  # noqa: E402
from autokernel.problems.xielu import ALPHA_RANGE, BETA_RANGE, EPS_RANGE, draw_scalars, eager_bytes  # noqa: E402
from autokernel.recognize import xielu_scalars  # noqa: E402

from test_integrate import make_workdir, rel  # noqa: E402

HF = importlib.util.find_spec("transformers") is not None
TINY_APERTUS = ("hidden_size=64,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,intermediate_size=128,"
                "vocab_size=256")


def judged(problem, dtype, out, args) -> bool:
    ref = problem.reference(*upcast(args, torch.float64))
    return compare.compare_outputs(out, ref, compare.output_meta(out), problem.tolerance(dtype)).ok


def cases(problem, shape, dtype):
    return [("random", problem.make_inputs(dict(shape), dtype, "cpu", s)) for s in range(3)] + \
        problem.adversarial_inputs(dict(shape), dtype, "cpu", 5)


def xielu_module(dtype: torch.dtype, alpha_p: float = 0.8, alpha_n: float = 0.8, beta: float = 0.5, eps: float = -1e-6):
    from transformers.activations import XIELUActivation

    return XIELUActivation(alpha_p_init=alpha_p, alpha_n_init=alpha_n, beta=beta, eps=eps, dtype=dtype)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("init", [(0.8, 0.8, 0.5, -1e-6), (3.0, 1.7, 0.3, -1e-4)], ids=["apertus-init", "other"])
def test_starter_and_the_modules_own_forward_match_the_reference(dtype, init):
    """The numbers ``xielu_scalars`` reads, handed to the starter, give the module's output: both
    pass the judge's tolerance against the fp64 reference on draws, around eps and on small
    negative values (the module's expm1 and clamp in its dtype, rounding after each op)."""
    problem = get_problem("xielu")
    module = xielu_module(dtype, *init)
    scalars = xielu_scalars(module)
    in_dtype = [float(torch.tensor(v, dtype=dtype)) for v in init]
    assert scalars[2:] == tuple(in_dtype[2:])  # beta and eps: the buffers' values, rounded to their dtype
    kernel = load_starter("xielu")
    for name, (x, *_) in cases(problem, {"M": 9, "N": 300}, dtype):
        if name == "nan":
            continue
        args = (x, *scalars)
        with torch.no_grad():
            own = module(x)
        got = kernel.kernel_fn(*args)
        assert got.dtype == own.dtype == dtype
        assert judged(problem, dtype, own, args), (name, "the module's own forward")
        assert judged(problem, dtype, got, args), (name, "the starter")


def _ignores_eps(x, alpha_p, alpha_n, beta, eps):
    return get_problem("xielu").reference(x, alpha_p, alpha_n, beta, 0.0)


def _apertus_numbers(x, alpha_p, alpha_n, beta, eps):
    return get_problem("xielu").reference(x, 0.8, 0.8, 0.5, -1e-6)


def _alphas_swapped(x, alpha_p, alpha_n, beta, eps):
    return get_problem("xielu").reference(x, alpha_n, alpha_p, beta, eps)


@pytest.mark.parametrize("wrong", [_apertus_numbers, _alphas_swapped], ids=["apertus-numbers", "alphas-swapped"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_inputs_catch_a_wrong_kernel(wrong, dtype):
    problem = get_problem("xielu")
    failed = [name for name, args in cases(problem, problem.cpu_shapes[0], dtype)
              if not judged(problem, dtype, wrong(*args), args)]
    assert failed, f"{wrong.__name__} passes every case"


def test_the_around_eps_case_catches_a_kernel_that_ignores_eps():
    """min(x, 0) for min(x, eps) is off by about |eps| alpha_n: fp32's tolerance sees it on every
    draw; bf16's (atol 1.6e-2) only where |eps| alpha_n passes it (eps drawn up to -1e-2)."""
    problem = get_problem("xielu")
    caught = {}
    for dtype in (torch.float32, torch.bfloat16):
        caught[dtype] = sum(not judged(problem, dtype, _ignores_eps(*args), args)
                            for args in (dict(problem.adversarial_inputs({"M": 16, "N": 256}, dtype, "cpu", seed))
                                         ["around-eps"] for seed in range(20)))
    assert caught[torch.float32] == 20 and caught[torch.bfloat16] >= 3, caught


def _expm1_cancelling(x, alpha_p, alpha_n, beta, eps):
    """expm1 as exp(m) - 1 in fp32: right to 6e-8 absolute, off relatively for a small m."""
    v = x.float()
    negative = (torch.exp(torch.clamp(v, max=eps)) - 1.0 - v) * alpha_n + beta * v
    return torch.where(v > 0, alpha_p * v * v + beta * v, negative).to(x.dtype)


def test_the_small_negative_case_catches_an_expm1_that_cancels():
    """Where alpha_n is large next to beta the error of exp(m) - 1 (times alpha_n) shows against
    the output's beta x: fp32's relative-norm bound catches it on some draws."""
    problem = get_problem("xielu")
    caught = sum(not judged(problem, torch.float32, _expm1_cancelling(*args), args)
                 for args in (dict(problem.adversarial_inputs({"M": 16, "N": 256}, torch.float32, "cpu", seed))
                              ["small-negative"] for seed in range(10)))
    assert caught >= 2, caught


def test_scalars_are_drawn_from_continuous_ranges():
    drawn = [draw_scalars(seed) for seed in range(40)]
    assert drawn == [draw_scalars(seed) for seed in range(40)]  # the same seed, the same numbers
    for i, values in enumerate(zip(*drawn)):
        assert len(set(values)) == len(values), ("alpha_p", "alpha_n", "beta", "eps")[i]
    for alpha_p, alpha_n, beta, eps in drawn:
        assert ALPHA_RANGE[0] <= alpha_p <= ALPHA_RANGE[1] and BETA_RANGE[0] <= beta <= BETA_RANGE[1]
        assert ALPHA_RANGE[0] <= alpha_n - beta <= ALPHA_RANGE[1] and EPS_RANGE[0] <= -eps <= EPS_RANGE[1]
    problem = get_problem("xielu")
    assert problem.make_inputs({"M": 2, "N": 3}, torch.float32, "cpu", 7)[1:] == draw_scalars(7)


def test_bytes_at_apertus_8b():
    problem = get_problem("xielu")
    shape = {"M": 4096, "N": 21504}
    assert problem.bytes(shape, torch.bfloat16) == pytest.approx(352.3e6, rel=1e-3)
    assert eager_bytes(shape, torch.bfloat16) == pytest.approx(29 / 2 * problem.bytes(shape, torch.bfloat16))


class NotXielu(nn.Module):
    """The four tensors, another function."""

    def __init__(self):
        super().__init__()
        self.alpha_p, self.alpha_n = nn.Parameter(torch.tensor([0.2])), nn.Parameter(torch.tensor([0.3]))
        self.beta, self.eps = nn.Buffer(torch.tensor(0.5)), nn.Buffer(torch.tensor(-1e-6))

    def forward(self, x):
        return torch.relu(x) * self.beta


def test_a_module_with_the_tensors_that_computes_something_else_is_left_alone(tmp_path):
    model = nn.Sequential(NotXielu())
    problem = PlanProblem("xielu", "xielu", "fp32", [{"M": 6, "N": 32}], [1], 100.0, 0.5, ["0"])
    patched = apply(model, make_workdir(tmp_path / "wd", [problem]))
    assert patched._autokernel_replaced == []
    assert any("probe mismatch" in why for _, why in patched._autokernel_skipped)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("dtype,bound", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
def test_apertus_is_planned_placed_and_matches(dtype, bound, tmp_path):
    """hf:apertus: each MLP's act_fn is one xielu problem (its dozen element-wise ops uncovered
    before); the patched model calls the op once a layer, with the module's numbers, matches the
    original, and follows a change of alpha_n (read again, not kept from apply)."""
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    loaded = load_model("hf:apertus", config_overrides=TINY_APERTUS, input_shape=[1, 8], dtype=dtype)
    plan = profile_model(loaded, warmup=0, iters=1)
    problem = next(p for p in plan.problems if p.kind == "xielu")
    acts = [f"model.model.layers.{i}.mlp.act_fn" for i in range(2)]
    assert problem.supported and problem.modules == acts and problem.dtype == dtype_name(dtype)
    assert problem.shapes == [{"M": 8, "N": 128}]
    assert not {"aten::expm1", "aten::where", "aten::softplus"} & {u.name for u in plan.not_covered}
    patched = apply(loaded.model, make_workdir(tmp_path / "wd", [problem], model="hf:apertus", input_shape=(1, 8),
                                               dtype=problem.dtype))
    assert {(a, "xielu") for a in acts} <= set(patched._autokernel_replaced)
    op = patched._autokernel_ops[problem.name]
    original = loaded.model
    ids = torch.randint(0, 256, (1, 8))
    before = OP_CALLS[op]
    with torch.no_grad():
        assert rel(patched(ids), original(ids)) < bound
        assert OP_CALLS[op] - before == 2
        alphas = {id(m.model.model.layers[0].mlp.act_fn.alpha_n): m.model.model.layers[0].mlp.act_fn.alpha_n
                  for m in (patched, original)}
        for alpha_n in alphas.values():  # one tensor where apply shares the weights
            alpha_n.add_(1.0)
        assert float(patched.model.model.layers[0].mlp.act_fn.alpha_n) == float(
            original.model.model.layers[0].mlp.act_fn.alpha_n)
        assert rel(patched(ids), original(ids)) < bound
