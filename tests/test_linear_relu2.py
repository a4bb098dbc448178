"""linear_relu2 (a biased linear and its squared ReLU in one kernel), on CPU under the Triton
interpreter: the starter's variants against the reference, the numerics case that catches a
kernel that forgets to square or squares before the clamp, fp16's cases kept inside its range,
the bytes the fusion saves; the profiler planning it for a squared-ReLU module (transformers'
``ReLUSquaredActivation``: Nemotron, Arcee) and for ``torch.square(torch.relu(self.key(x)))``
calls (RWKV); ``apply`` replacing each pair with one op call (the patched model matching the
original), and leaving alone what only looks like the pair."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.harness.compare import compare_tensor  # noqa: E402
from autokernel.integrate import OP_CALLS, apply  # noqa: E402
from autokernel.plan import PlanProblem  # noqa: E402
from autokernel.problems import get_problem  # noqa: E402
from autokernel.problems.registry import load_starter  # noqa: E402

from test_integrate import make_workdir, rel  # noqa: E402
from test_linear_gelu import ActOnInput, Chunked, Consecutive, HelperMethod, Intermediate  # noqa: E402

HF = importlib.util.find_spec("transformers") is not None
SMALL = ("hidden_size=64,num_hidden_layers=2,num_attention_heads=4,intermediate_size=128,vocab_size=256,"
         "num_key_value_heads=2")


class SquaredReLU(nn.Module):
    """transformers' ``ReLUSquaredActivation`` (``ACT2FN["relu2"]``), written out here so that the
    tests below run without transformers."""

    def forward(self, x):
        return torch.square(F.relu(x))


@pytest.mark.parametrize("variant", ["pointers", "descriptors"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_starter_variants_match_the_reference(variant, dtype):
    problem = get_problem("linear_relu2")
    module = load_starter("linear_relu2", {"variant": variant, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16})
    for shape in ({"M": 37, "N": 70, "K": 40}, {"M": 5, "N": 24, "K": 64}):
        x, w, b = problem.make_inputs(shape, dtype, "cpu", 3)
        want = problem.reference(x.double(), w.double(), b.double())
        got = module.kernel_fn(x, w, b)
        assert got.shape == want.shape and got.dtype == dtype
        assert (want == 0).any() and (want > 1).any()  # both sides of the kink, and squares past 1
        tol = problem.tolerance(dtype)
        torch.testing.assert_close(got.double(), want, rtol=tol.rtol, atol=tol.atol)


def test_bias_is_added_per_column_then_clamped_then_squared():
    module = load_starter("linear_relu2")
    x, w = torch.zeros(3, 8), torch.randn(5, 8)
    b = torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0])
    got = module.kernel_fn(x, w, b)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, 0.0, 0.25, 9.0]).expand(3, 5), rtol=0, atol=0)


def _relu_not_squared(x, w, b):
    return F.relu(F.linear(x.float(), w.float(), b.float())).to(x.dtype)


def _squared_before_the_clamp(x, w, b):
    return F.relu(torch.square(F.linear(x.float(), w.float(), b.float()))).to(x.dtype)


@pytest.mark.parametrize("wrong", [_relu_not_squared, _squared_before_the_clamp], ids=["not-squared", "squared-first"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_square_after_clamp_case_fails_a_wrong_epilogue_at_every_shape(wrong, dtype):
    """The case's outputs are b^2 or exactly 0 by column, whatever the draw: it fails both wrong
    epilogues at every target and edge shape (the 5x3x1 one included)."""
    problem = get_problem("linear_relu2")
    tol = problem.tolerance(dtype)
    for shape in (*problem.cpu_shapes, *problem.cpu_edge_shapes):
        cases = dict(problem.adversarial_inputs(shape, dtype, "cpu", 11))
        case = cases["square-after-clamp"]
        assert compare_tensor(problem.reference(*case), problem.reference(*[a.double() for a in case]), tol).ok
        assert not compare_tensor(wrong(*case), problem.reference(*[a.double() for a in case]), tol).ok, shape


def test_every_fp16_case_squares_inside_fp16s_range():
    """fp16's positive-sum case puts pre-activations near 2e4 (their squares past 65504): each
    case is scaled down by a power of two until its squares fit, so the reference is finite."""
    problem = get_problem("linear_relu2")
    scaled = False
    for shape in (*problem.cpu_shapes, *problem.cpu_edge_shapes):
        for name, args in problem.adversarial_inputs(shape, torch.float16, "cpu", 5):
            ref = problem.reference(*[a.double() for a in args]).nan_to_num(0.0)  # the non-finite case's NaN row
            assert float(ref.max()) < 65504 / 2, (shape, name)
            scaled |= name == "positive-sum" and float(ref.max()) > 100
    assert scaled  # the case is still one of large positive sums


def test_fusion_saves_two_writes_and_two_reads_of_the_intermediates():
    from autokernel.problems.linear_relu2 import unfused_bytes

    problem = get_problem("linear_relu2")
    arcee = {"M": 4096, "N": 18432, "K": 2560}
    fused = problem.bytes(arcee, torch.bfloat16)
    assert fused == 2 * (4096 * 2560 + 18432 * 2560 + 18432 + 4096 * 18432)
    assert unfused_bytes(arcee, torch.bfloat16) - fused == 4 * 2 * 4096 * 18432
    assert problem.flops(arcee) == 2 * 4096 * 18432 * 2560
    assert problem.dims == ("M", "N", "K") and arcee in [dict(s) for s in problem.gpu_shapes]


# ------------------------------------------------------------------ recognition and integration
def _patch(module: nn.Module, tmp_path, kinds=("linear_relu2",)):
    model = nn.Sequential()
    model.add_module("mlp", module.eval())
    problems = [PlanProblem(kind, kind, "fp32", [{"M": 6, "N": 48, "K": 32}], [1], 10.0, 0.3, ["mlp"])
                for kind in kinds]
    return model, apply(model, make_workdir(tmp_path / "wd", problems, model="custom"))


class UpDown(nn.Module):
    """Nemotron's and Arcee's MLP: ``down_proj(act_fn(up_proj(x)))``, bias-free linears."""

    def __init__(self, act: nn.Module, d=32, h=48, bias=False):
        super().__init__()
        self.up_proj, self.down_proj = nn.Linear(d, h, bias=bias), nn.Linear(h, d, bias=bias)
        self.act_fn = act

    def forward(self, x):
        return self.down_proj(self.act_fn(self.up_proj(x)))


class SquaredReLUFeedForward(nn.Module):
    """RWKV's ``RwkvFeedForward``: ``torch.square(torch.relu(self.key(x)))`` amid two more
    bias-free linears, the squared ReLU two function calls, not a module."""

    def __init__(self, d=32, h=48):
        super().__init__()
        self.key, self.value = nn.Linear(d, h, bias=False), nn.Linear(h, d, bias=False)
        self.receptance = nn.Linear(d, d, bias=False)

    def forward(self, x):
        key = torch.square(torch.relu(self.key(x)))
        return torch.sigmoid(self.receptance(x)) * self.value(key)


class SquaredReLUStatements(SquaredReLUFeedForward):
    """``k = self.key(x); k = torch.square(F.relu(k))``, two statements."""

    def forward(self, x):
        k = self.key(x)
        k = torch.square(F.relu(k))
        return self.value(k) - x


class SquaredReLUInAHelper(SquaredReLUFeedForward):
    def forward(self, x):
        return torch.sigmoid(self.receptance(x)) * self.value(self.squared_key(x))

    def squared_key(self, x):
        return torch.square(torch.relu(self.key(x)))


class SquaredBeforeTheClamp(SquaredReLUFeedForward):  # relu(x^2) = x^2: another function
    def forward(self, x):
        return self.value(torch.relu(torch.square(self.key(x))))


class PlainFunctionalReLU(SquaredReLUFeedForward):  # linear_relu's pattern, not this kind's
    def forward(self, x):
        return self.value(torch.relu(self.key(x)))


class ReLUCubed(nn.Module):  # a leaf activation named like one, computing something else
    def forward(self, x):
        return torch.relu(x) ** 3


class SquaredReLUPlusOne(nn.Module):
    def forward(self, x):
        return torch.square(torch.relu(x)) + 1.0


@pytest.mark.parametrize("module", [lambda: Intermediate(SquaredReLU()), lambda: UpDown(SquaredReLU()),
                                    lambda: UpDown(SquaredReLU(), bias=True), lambda: Consecutive(SquaredReLU()),
                                    lambda: Chunked(SquaredReLU()), lambda: HelperMethod(SquaredReLU(), bias=False)],
                         ids=["chain", "nemotron-like-mlp", "biased-mlp", "rewritten-forward", "chunked-bound-method",
                              "no-bias-helper-method"])
def test_a_squared_relu_module_pair_becomes_one_op_call(module, tmp_path):
    torch.manual_seed(0)
    model, patched = _patch(module(), tmp_path)
    assert patched._autokernel_replaced == [("mlp", "linear_relu2")]
    op = patched._autokernel_ops["linear_relu2"]
    before = OP_CALLS[op]
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
    assert OP_CALLS[op] == before + 1


@pytest.mark.parametrize("module,pairs", [(SquaredReLUFeedForward, 1), (SquaredReLUStatements, 1),
                                          (SquaredReLUInAHelper, 1)],
                         ids=["nested-calls", "two-statements", "in-a-helper-method"])
def test_a_linear_then_squared_relu_calls_are_planned_and_one_op_call(module, pairs, tmp_path):
    """Planned by the profiler (the relu op right after the linear module's call, then the square
    op on its output: both in the problem) and placed by ``apply``, which rewrites the forward's
    ``torch.square(torch.relu(self.<linear>(...)))``."""
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("mlp", module().eval())
    x = torch.randn(2, 3, 32)
    plan = profile_model(LoadedModel(model, lambda seed: (x,), "custom", "squared ReLU calls", [2, 3, 32]),
                         warmup=0, iters=1)
    fused = next(p for p in plan.problems if p.kind == "linear_relu2")
    assert fused.supported and fused.modules == ["mlp"] and fused.shapes == [{"M": 6, "N": 48, "K": 32}], fused.note
    assert "linear_relu" not in {p.kind for p in plan.problems}
    assert not any(u.name in ("aten::relu", "aten::square", "aten::pow") for u in plan.not_covered), plan.not_covered
    fused.name = "linear_relu2"
    patched = apply(model, make_workdir(tmp_path / "wd", [fused], model="custom"))
    assert patched._autokernel_replaced == [("mlp", "linear_relu2")]
    op = patched._autokernel_ops["linear_relu2"]
    before = OP_CALLS[op]
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
        assert OP_CALLS[op] - before == pairs
    before = OP_CALLS[op]
    with torch.no_grad():  # fp64 calls, which the op was not judged on: the linear and the calls
        assert rel(patched.double()(x.double()), model.double()(x.double())) < 1e-12
    assert OP_CALLS[op] == before


class SquaredStack(nn.Module):
    """Two squared-ReLU MLPs (one with biases), an nn.ReLU pair and a look-alike (ReLU cubed)."""

    def __init__(self):
        super().__init__()
        self.mlp = UpDown(SquaredReLU())
        self.biased = UpDown(SquaredReLU(), bias=True)
        self.relu = Intermediate(nn.ReLU(), d=32, h=40)
        self.cubed = UpDown(ReLUCubed(), d=40, h=24)

    def forward(self, x):
        return self.cubed(self.relu(self.biased(self.mlp(x))))


def test_profiler_plans_a_squared_relu_module_after_a_linear_and_nothing_else():
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    torch.manual_seed(0)
    loaded = LoadedModel(SquaredStack().eval(), lambda seed: (torch.randn(2, 5, 32),), "custom", "four MLPs",
                         [2, 5, 32])
    plan = profile_model(loaded, warmup=0, iters=1)
    fused = next(p for p in plan.problems if p.kind == "linear_relu2")
    assert sorted(fused.modules) == ["biased", "mlp"] and fused.shapes == [{"M": 10, "N": 48, "K": 32}]
    assert "SquaredReLU (relu then square)" in fused.note, fused.note
    assert next(p for p in plan.problems if p.kind == "linear_relu").modules == ["relu"]
    assert not any(u.name == "aten::square" for u in plan.not_covered)
    assert any(u.name == "aten::pow" for u in plan.not_covered)  # the cubed one's


@pytest.mark.parametrize("module,reason", [
    (lambda: Intermediate(nn.ReLU()), None),
    (lambda: UpDown(ReLUCubed()), None),
    (lambda: UpDown(SquaredReLUPlusOne()), None),
    (lambda: ActOnInput(SquaredReLU()), "chain of children"),
    (SquaredBeforeTheClamp, None),
    (PlainFunctionalReLU, None),
], ids=["plain-relu-module", "relu-cubed", "squared-relu-plus-one", "squared-relu-on-input", "squared-before-the-clamp",
        "plain-functional-relu"])
def test_squared_relu_look_alikes_are_left_alone(module, reason, tmp_path):
    torch.manual_seed(0)
    model, patched = _patch(module(), tmp_path)
    assert patched._autokernel_replaced == []
    if reason is not None:
        skipped = patched._autokernel_skipped
        assert any(name == "mlp" and reason in why for name, why in skipped), skipped
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-6


def test_relu_and_squared_relu_pairs_in_one_forward_each_call_their_op(tmp_path):
    class Both(SquaredReLUFeedForward):
        def forward(self, x):
            return self.value(torch.square(torch.relu(self.key(x)))) + torch.relu(self.receptance(x))

    torch.manual_seed(0)
    model, patched = _patch(Both(), tmp_path, kinds=("linear_relu", "linear_relu2"))
    assert sorted(patched._autokernel_replaced) == [("mlp", "linear_relu"), ("mlp", "linear_relu2")]
    ops = [patched._autokernel_ops[kind] for kind in ("linear_relu", "linear_relu2")]
    before = [OP_CALLS[op] for op in ops]
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
    assert [OP_CALLS[op] - b for op, b in zip(ops, before)] == [1, 1]


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("spec,mlps", [
    ("hf:nemotron", [f"model.model.layers.{i}.mlp" for i in range(2)]),
    ("hf:arcee", [f"model.model.layers.{i}.mlp" for i in range(2)]),
    ("hf:rwkv", [f"model.rwkv.blocks.{i}.feed_forward" for i in range(2)]),
])
def test_hugging_face_squared_relus_are_planned_and_placed(spec, mlps, tmp_path):
    """Nemotron's and Arcee's ``down_proj(act_fn(up_proj(x)))`` with ``ACT2FN["relu2"]``, and
    RWKV's ``torch.square(torch.relu(self.key(key)))``: their ReLU and square were uncovered
    (hf:arcee aten::square 11.9%, aten::relu 2.9%), or RWKV's square outside its linear_relu."""
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    config = (SMALL if spec != "hf:rwkv" else
              "hidden_size=64,num_hidden_layers=2,attention_hidden_size=64,intermediate_size=128,vocab_size=256")
    loaded = load_model(spec, config_overrides=config, input_shape=[1, 8], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    problem = next(p for p in plan.problems if p.kind == "linear_relu2")
    assert problem.supported and problem.modules == mlps, problem.note
    assert problem.shapes == [{"M": 8, "N": 128, "K": 64}]
    assert "linear_relu" not in {p.kind for p in plan.problems}
    assert not any(u.name in ("aten::relu", "aten::square") for u in plan.not_covered)
    patched = apply(loaded.model, make_workdir(tmp_path / "wd", [problem], model=spec, input_shape=(1, 8)))
    assert {(m, "linear_relu2") for m in mlps} <= set(patched._autokernel_replaced)
    op = patched._autokernel_ops[problem.name]
    before = OP_CALLS[op]
    ids = torch.randint(0, 256, (1, 8))
    with torch.no_grad():
        out, ref = patched(ids), loaded.model(ids)
    assert rel(out, ref) < 1e-5
    assert OP_CALLS[op] - before == len(mlps)
