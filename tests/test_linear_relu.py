"""linear_relu (a biased linear and its ReLU in one kernel), on CPU under the Triton interpreter:
the starter's variants against the reference, the numerics case at ReLU's kink, the bytes the
fusion saves; the profiler planning it in a tiny Hugging Face OPT and T5 (whose ``wi`` has no
bias: ``apply`` hands the kernel zeros); ``apply`` replacing each pair with one op call (the
patched model matching the original), and leaving alone what only looks like the pair."""
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
OPT = "hidden_size=64,num_hidden_layers=2,num_attention_heads=4,ffn_dim=128,word_embed_proj_dim=64,vocab_size=256"
T5 = "d_model=64,num_layers=2,num_heads=4,d_ff=128,d_kv=16,vocab_size=256"


@pytest.mark.parametrize("variant", ["pointers", "descriptors"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_starter_variants_match_the_reference(variant, dtype):
    problem = get_problem("linear_relu")
    module = load_starter("linear_relu", {"variant": variant, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16})
    # 5x24x64: every row 16-byte aligned, so bf16 takes the descriptors; 37x70x40 does not
    for shape in ({"M": 37, "N": 70, "K": 40}, {"M": 5, "N": 24, "K": 64}):
        x, w, b = problem.make_inputs(shape, dtype, "cpu", 3)
        want = problem.reference(x.double(), w.double(), b.double())
        got = module.kernel_fn(x, w, b)
        assert got.shape == want.shape and got.dtype == dtype
        assert (want == 0).any() and (want > 0).any()  # both sides of the kink
        tol = problem.tolerance(dtype)
        torch.testing.assert_close(got.double(), want, rtol=tol.rtol, atol=tol.atol)


def test_bias_is_added_per_column_before_the_clamp():
    module = load_starter("linear_relu")
    x, w = torch.zeros(3, 8), torch.randn(5, 8)
    b = torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0])
    got = module.kernel_fn(x, w, b)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, 0.0, 0.5, 3.0]).expand(3, 5), rtol=0, atol=0)


def _smoothed_relu(x, w, b):
    """A ReLU with its kink rounded off (softplus, beta 100: off by up to 0.007 near zero)."""
    return torch.nn.functional.softplus(torch.nn.functional.linear(x.float(), w.float(), b.float()), beta=100).to(x.dtype)


def test_a_smoothed_kink_fails_only_the_straddling_zero_case_in_bf16():
    """Regular draws put few pre-activations near zero, and bf16's bounds are loose: a smoothed
    ReLU passes them and every shared case; pre-activations straddling zero show it (the
    numerics stage runs its cases at every target shape)."""
    problem = get_problem("linear_relu")
    tol = problem.tolerance(torch.bfloat16)
    for shape in (*problem.cpu_shapes, *problem.cpu_edge_shapes):
        args = problem.make_inputs(shape, torch.bfloat16, "cpu", 5)
        failed = [] if compare_tensor(_smoothed_relu(*args), problem.reference(*[a.double() for a in args]), tol).ok \
            else ["draw"]
        for name, case in problem.adversarial_inputs(shape, torch.bfloat16, "cpu", 5):
            if not compare_tensor(_smoothed_relu(*case), problem.reference(*[a.double() for a in case]), tol).ok:
                failed.append(name)
        # the case fails at every target shape; on the 15 outputs of a tiny edge shape it may miss
        assert failed == ["straddling-zero"] or (shape not in problem.cpu_shapes and failed == []), (shape, failed)


def test_fusion_saves_one_write_and_one_read_of_the_intermediate():
    from autokernel.problems.linear_relu import unfused_bytes

    problem = get_problem("linear_relu")
    opt_125m = {"M": 4096, "N": 3072, "K": 768}
    fused = problem.bytes(opt_125m, torch.bfloat16)
    assert fused == 2 * (4096 * 768 + 3072 * 768 + 3072 + 4096 * 3072)
    assert unfused_bytes(opt_125m, torch.bfloat16) - fused == 2 * 2 * 4096 * 3072
    assert problem.flops(opt_125m) == 2 * 4096 * 3072 * 768


# ------------------------------------------------------------------ recognition and integration
@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_opt_layers_get_fc1_and_relu_as_one_op_call(tmp_path):
    """OPT's decoder layer runs ``h = self.fc1(h); h = self.activation_fn(h)`` amid attention and
    residual adds: planned as linear_relu at the layer, its forward rewritten to call the op."""
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    loaded = load_model("hf:opt", config_overrides=OPT, input_shape=[1, 8], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    problem = next(p for p in plan.problems if p.kind == "linear_relu")
    layers = [f"model.model.decoder.layers.{i}" for i in range(2)]
    assert problem.supported and problem.modules == layers
    assert problem.shapes == [{"M": 8, "N": 128, "K": 64}]
    assert not any(u.name == "aten::relu" for u in plan.not_covered)
    patched = apply(loaded.model, make_workdir(tmp_path / "wd", [problem], model="hf:opt", input_shape=(1, 8)))
    assert set(layers) <= {name for name, kind in patched._autokernel_replaced if kind == "linear_relu"}
    ids = torch.randint(0, 256, (1, 8))
    op = patched._autokernel_ops[problem.name]
    before = OP_CALLS[op]
    with torch.no_grad():
        out, ref = patched(ids), loaded.model(ids)
    assert rel(out, ref) < 1e-5
    assert OP_CALLS[op] - before == len(layers)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_t5s_bias_free_wi_and_relu_are_one_op_call(tmp_path):
    """T5's ``T5DenseActDense`` runs ``wi`` (no bias), ``act`` (an nn.ReLU), dropout, ``wo``: planned
    as linear_relu at that module in every encoder and decoder layer; ``apply`` hands the op a
    zero bias kept on ``wi`` (not in the state dict)."""
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    loaded = load_model("hf:t5", config_overrides=T5, input_shape=[1, 8], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    problem = next(p for p in plan.problems if p.kind == "linear_relu")
    mlps = [f"model.{stack}.block.{i}.layer.{j}.DenseReluDense"
            for stack, j in (("encoder", 1), ("decoder", 2)) for i in range(2)]
    assert problem.supported and sorted(problem.modules) == sorted(mlps)
    assert problem.shapes == [{"M": 8, "N": 128, "K": 64}]
    assert not any(u.name == "aten::relu" for u in plan.not_covered)
    model = loaded.model
    keys = set(model.state_dict())
    patched = apply(model, make_workdir(tmp_path / "wd", [problem], model="hf:t5", input_shape=(1, 8)))
    assert set(mlps) <= {name for name, kind in patched._autokernel_replaced if kind == "linear_relu"}
    wi = patched.get_submodule(mlps[0]).wi
    assert wi.bias is None and torch.equal(wi._autokernel_zero_bias, torch.zeros(128))
    assert set(patched.state_dict()) == keys
    op = patched._autokernel_ops[problem.name]
    before = OP_CALLS[op]
    ids = torch.randint(0, 256, (1, 8))
    with torch.no_grad():
        out = patched(ids)
    fresh = load_model("hf:t5", config_overrides=T5, input_shape=[1, 8], dtype=torch.float32).model
    fresh.load_state_dict(patched.state_dict())
    with torch.no_grad():
        assert rel(out, fresh(ids)) < 1e-5
    assert OP_CALLS[op] - before == len(mlps)


def _patch(module: nn.Module, tmp_path, kinds=("linear_relu",)):
    model = nn.Sequential()
    model.add_module("mlp", module.eval())
    problems = [PlanProblem(kind, kind, "fp32", [{"M": 6, "N": 48, "K": 32, **({"tanh": 0} if kind == "linear_gelu" else {})}],
                            [1], 10.0, 0.3, ["mlp"]) for kind in kinds]
    return model, apply(model, make_workdir(tmp_path / "wd", problems, model="custom"))


class T5LikeMLP(nn.Module):
    """T5's ``T5DenseActDense``: a bias-free ``wi``, an nn.ReLU, dropout, a bias-free ``wo``."""

    def __init__(self, d=32, h=48):
        super().__init__()
        self.wi, self.wo = nn.Linear(d, h, bias=False), nn.Linear(h, d, bias=False)
        self.dropout, self.act = nn.Dropout(0.1), nn.ReLU()

    def forward(self, x):
        return self.wo(self.dropout(self.act(self.wi(x))))


class T5WoInAnotherDtype(T5LikeMLP):
    """T5's own forward, with ``wo`` in another dtype than the run's (T5 keeps ``wo`` in fp32 in a
    bf16 model; fp64 in this fp32 run): only the pair's linear must be in the run's dtype."""

    def __init__(self):
        super().__init__()
        self.wo.double()

    def forward(self, hidden_states):
        hidden_states = self.wi(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.dropout(hidden_states)
        if hidden_states.dtype != self.wo.weight.dtype:
            hidden_states = hidden_states.to(self.wo.weight.dtype)
        return self.wo(hidden_states)


@pytest.mark.parametrize("module", [lambda: Intermediate(nn.ReLU()), lambda: Consecutive(nn.ReLU()), T5LikeMLP,
                                    T5WoInAnotherDtype, lambda: Intermediate(nn.ReLU(), bias=False),
                                    lambda: Consecutive(nn.ReLU(), bias=False), lambda: Chunked(nn.ReLU()),
                                    lambda: HelperMethod(nn.ReLU(), bias=False)],
                         ids=["chain", "rewritten-forward", "t5-like", "t5-wo-in-another-dtype", "no-bias-chain",
                              "no-bias-rewritten-forward", "chunked-bound-method", "no-bias-helper-method"])
def test_a_relu_pair_becomes_one_op_call(module, tmp_path):
    torch.manual_seed(0)
    model, patched = _patch(module(), tmp_path)
    assert patched._autokernel_replaced == [("mlp", "linear_relu")]
    op = patched._autokernel_ops["linear_relu"]
    before = OP_CALLS[op]
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
    assert OP_CALLS[op] == before + 1


class ShiftedBeforeReLU(Intermediate):  # a bias-free linear, its bias written in the forward
    def forward(self, x):
        return self.norm(self.act(self.fc(x) + 0.5))


class ReLUCappedAtSix(nn.ReLU):  # a ReLU by its class, another function by its forward
    def forward(self, x):
        return x.clamp(0.0, 6.0)


class ReLUThenGELU(nn.Module):
    """A GELU pair and a ReLU pair in one longer forward: the forward is rewritten for each kind."""

    def __init__(self):
        super().__init__()
        self.fc_in, self.gelu = nn.Linear(32, 48), nn.GELU()
        self.fc_out, self.relu = nn.Linear(48, 40), nn.ReLU()

    def forward(self, x):
        h = self.gelu(self.fc_in(x))
        return self.relu(self.fc_out(h)) * 2.0


def test_both_epilogues_in_one_forward_each_call_their_op(tmp_path):
    torch.manual_seed(0)
    model, patched = _patch(ReLUThenGELU(), tmp_path, kinds=("linear_gelu", "linear_relu"))
    assert sorted(patched._autokernel_replaced) == [("mlp", "linear_gelu"), ("mlp", "linear_relu")]
    ops = [patched._autokernel_ops[kind] for kind in ("linear_gelu", "linear_relu")]
    before = [OP_CALLS[op] for op in ops]
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
    assert [OP_CALLS[op] - b for op, b in zip(ops, before)] == [1, 1]


@pytest.mark.parametrize("module,reason", [
    (lambda: Intermediate(nn.ReLU6()), None),
    (lambda: Intermediate(nn.LeakyReLU()), None),
    (lambda: Intermediate(ReLUCappedAtSix()), None),
    (lambda: ActOnInput(nn.ReLU()), "chain of children"),
    (lambda: ActOnInput(nn.ReLU(), bias=False), "chain of children"),
    (lambda: ShiftedBeforeReLU(nn.ReLU(), bias=False), "chain of children"),
    (lambda: Intermediate(nn.ReLU6(), bias=False), None),
], ids=["relu6", "leaky-relu", "relu-subclass-capped", "relu-on-input", "no-bias-relu-on-input",
        "no-bias-shifted-before-relu", "no-bias-relu6"])
def test_relu_look_alikes_are_left_alone(module, reason, tmp_path):
    model, patched = _patch(module(), tmp_path)
    assert patched._autokernel_replaced == []
    if reason is not None:
        assert any(name == "mlp" and reason in why for name, why in patched._autokernel_skipped), patched._autokernel_skipped


class ReLUStack(nn.Module):
    """Two real pairs (one with no bias) and a look-alike: a ReLU6."""

    def __init__(self):
        super().__init__()
        self.pair = Intermediate(nn.ReLU())
        self.no_bias = Intermediate(nn.ReLU(), d=48, h=40, bias=False)
        self.relu6 = Intermediate(nn.ReLU6(), d=40, h=32)

    def forward(self, x):
        return self.relu6(self.no_bias(self.pair(x)))


def test_profiler_plans_only_a_linear_directly_followed_by_a_relu_module():
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    torch.manual_seed(0)
    loaded = LoadedModel(ReLUStack().eval(), lambda seed: (torch.randn(2, 5, 32),), "custom", "three MLPs", [2, 5, 32])
    plan = profile_model(loaded, warmup=0, iters=1)
    fused = [p for p in plan.problems if p.kind == "linear_relu"]
    assert len(fused) == 1 and sorted(fused[0].modules) == ["no_bias", "pair"]
    assert sorted(fused[0].shapes, key=lambda s: s["N"]) == [{"M": 10, "N": 40, "K": 48}, {"M": 10, "N": 48, "K": 32}]
    assert "no bias" in fused[0].note, fused[0].note
    assert not any(u.name == "aten::relu" for u in plan.not_covered)


# ------------------------------------------------------------------ ReLU written as a function
class ReLUFeedForward(nn.Module):
    """RWKV's ``RwkvFeedForward`` with a plain ReLU: ``torch.relu(self.key(x))`` amid two more
    bias-free linears, the ReLU a function call, not a module.  (RWKV's own squares it:
    ``linear_relu2``, tests/test_linear_relu2.py.)"""

    def __init__(self, d=32, h=48):
        super().__init__()
        self.key, self.value = nn.Linear(d, h, bias=False), nn.Linear(h, d, bias=False)
        self.receptance = nn.Linear(d, d, bias=False)

    def forward(self, x):
        key = torch.relu(self.key(x))
        return torch.sigmoid(self.receptance(x)) * self.value(key)


class SquaredReLUFeedForward(ReLUFeedForward):
    """RWKV's own: ``torch.square(torch.relu(self.key(x)))``."""

    def forward(self, x):
        key = torch.square(torch.relu(self.key(x)))
        return torch.sigmoid(self.receptance(x)) * self.value(key)


class FunctionalReLUStatements(nn.Module):
    """``h = self.fc(x); h = nn.functional.relu(h)`` (biased), then ``F.relu`` nested, as
    DETR's prediction heads and SpeechT5's prenet write them."""

    def __init__(self, d=32, h=48):
        super().__init__()
        self.fc, self.out = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        h = self.fc(x)
        h = nn.functional.relu(h)
        return F.relu(self.out(h)) - x


class ReLUInAHelper(ReLUFeedForward):
    """That feed-forward with its key's ReLU in a method the forward calls."""

    def forward(self, x):
        return torch.sigmoid(self.receptance(x)) * self.value(self.relu_key(x))

    def relu_key(self, x):
        return torch.relu(self.key(x))


class ShiftedBeforeFunctionalReLU(ReLUFeedForward):
    def forward(self, x):
        return self.value(torch.relu(self.key(x) + 0.5))


@pytest.mark.parametrize("module,pairs", [(ReLUFeedForward, 1), (FunctionalReLUStatements, 2),
                                          (ReLUInAHelper, 1)],
                         ids=["torch.relu-nested", "functional-relu-statements", "torch.relu-in-a-helper-method"])
def test_a_linear_then_relu_written_as_a_function_is_one_op_call(module, pairs, tmp_path):
    """Planned by the profiler (the relu op right after the linear module's call) and placed by
    ``apply``, which rewrites the forward's ``torch.relu(self.<linear>(...))`` (or
    ``F.relu``, ``nn.functional.relu``, nested or in two statements)."""
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("mlp", module().eval())
    x = torch.randn(2, 3, 32)
    plan = profile_model(LoadedModel(model, lambda seed: (x,), "custom", "functional ReLU", [2, 3, 32]),
                         warmup=0, iters=1)
    fused = next(p for p in plan.problems if p.kind == "linear_relu")
    assert fused.supported and fused.modules == ["mlp"], fused.note
    assert not any(u.name == "aten::relu" for u in plan.not_covered)
    fused.name = "linear_relu"
    patched = apply(model, make_workdir(tmp_path / "wd", [fused], model="custom"))
    assert patched._autokernel_replaced == [("mlp", "linear_relu")]
    op = patched._autokernel_ops["linear_relu"]
    before = OP_CALLS[op]
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
        assert OP_CALLS[op] - before == pairs
    before = OP_CALLS[op]
    with torch.no_grad():  # fp64 calls, which the op was not judged on: the linear and torch.relu
        assert rel(patched.double()(x.double()), model.double()(x.double())) < 1e-12
    assert OP_CALLS[op] == before


def test_a_functional_relu_of_more_than_the_linear_is_left_alone(tmp_path):
    model, patched = _patch(ShiftedBeforeFunctionalReLU(), tmp_path)
    assert patched._autokernel_replaced == []
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-6


def test_a_linear_relu_plan_still_places_in_a_squared_relu(tmp_path):
    """RWKV's ``torch.square(torch.relu(self.key(x)))`` is planned as linear_relu2 since
    2026-12-06 (its hf:rwkv test is in tests/test_linear_relu2.py); a linear_relu problem (a
    plan made before) still takes the inner ``torch.relu(self.key(x))``, the square left as it is."""
    torch.manual_seed(0)
    model, patched = _patch(SquaredReLUFeedForward(), tmp_path)
    assert patched._autokernel_replaced == [("mlp", "linear_relu")]
    op = patched._autokernel_ops["linear_relu"]
    before = OP_CALLS[op]
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
    assert OP_CALLS[op] == before + 1


class PredictionHead(nn.Module):
    """DETR's ``DetrMLPPredictionHead``: ``F.relu(layer(x))`` over a ModuleList of linears, each
    a grandchild of the head, which ``apply`` cannot call as ``self.<linear>``."""

    def __init__(self, d=32, layers=3):
        super().__init__()
        self.num_layers = layers
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = nn.functional.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
        return x


def test_a_functional_relu_after_a_linear_apply_cannot_name_stays_a_matmul():
    """Planned as linear_relu, the pair found no place, and its GEMMs' time (placed as matmul
    before) counted as not covered."""
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    x = torch.randn(2, 3, 32)
    plan = profile_model(LoadedModel(PredictionHead().eval(), lambda seed: (x,), "custom", "DETR-like head", [2, 3, 32]),
                         warmup=0, iters=1)
    assert "linear_relu" not in {p.kind for p in plan.problems}
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    assert matmul.supported and sorted(matmul.module_time_us) == [f"layers.{i}" for i in range(3)]
