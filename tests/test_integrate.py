"""apply(): the run's kernels as custom ops inside the model (CPU, Triton interpreter).

The workdirs are made by hand: plan.json + problems/<name>/kernel.py copied from the shipped
starters.  torch.compile runs with backend="aot_eager": it traces the model with dynamo and
AOTAutograd exactly as inductor would (so a graph break or an op that is not opaque shows),
without inductor's C++ compile, which takes ~30 s per graph on a 2-core CPU.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

os.environ.setdefault("TRITON_INTERPRET", "1")

import autokernel  # noqa: E402
from autokernel.integrate import OP_CALLS, IntegrateError, apply  # noqa: E402
from autokernel.models import load_model  # noqa: E402
from autokernel.plan import Plan, PlanProblem, save_plan  # noqa: E402
from autokernel.problems.registry import KERNELS_DIR  # noqa: E402


def make_workdir(root: Path, problems: list[PlanProblem], *, model: str = "llama", dtype: str = "fp32",
                 input_shape=(1, 8), results: str | None = None, kernels: dict[str, str] | None = None,
                 time_kind: str = "cpu") -> Path:
    (root / "problems").mkdir(parents=True, exist_ok=True)
    for p in problems:
        d = root / "problems" / p.name
        d.mkdir(parents=True, exist_ok=True)
        if kernels and p.name in kernels:
            (d / "kernel.py").write_text(kernels[p.name])
        else:
            shutil.copyfile(KERNELS_DIR / f"{p.kind}.py", d / "kernel.py")
        (d / "problem.json").write_text(json.dumps({"spec": p.kind, "shapes": p.shapes, "dtype": p.dtype,
                                                    "fraction": p.fraction}))
    plan = Plan(model=model, device="cpu", time_kind=time_kind, dtype=dtype, input_shape=list(input_shape),
                total_time_us=1000.0, problems=problems)
    save_plan(plan, root / "plan.json")
    if results is not None:
        (root / "results.tsv").write_text(results)
    return root


def llama_problems(dtype: str = "fp32") -> list[PlanProblem]:
    return [
        PlanProblem("rmsnorm", "rmsnorm", dtype, [{"M": 8, "N": 64}], [1], 100.0, 0.1, ["layers.0.attn_norm"]),
        # the example adds the residual stream inside its norms: norm(h, residual)
        PlanProblem("add_rmsnorm", "add_rmsnorm", dtype, [{"M": 8, "N": 64}], [2], 100.0, 0.1,
                    ["layers.0.mlp_norm", "norm"]),
        PlanProblem("swiglu", "swiglu", dtype, [{"M": 8, "N": 176}], [1], 100.0, 0.1, ["layers.0.mlp"]),
        PlanProblem("rotary", "rotary", dtype, [{"B": 1, "H": 4, "S": 8, "D": 16}, {"B": 1, "H": 2, "S": 8, "D": 16}],
                    [1, 1], 100.0, 0.1, ["layers.0.attn"]),
        PlanProblem("attention", "attention", dtype, [{"B": 1, "H": 4, "Hkv": 2, "S": 8, "D": 16, "causal": 1}],
                    [1], 100.0, 0.1, ["layers.0.attn"]),
    ]


@pytest.fixture(scope="module")
def llama():
    return load_model("llama", dtype=torch.float32, device="cpu", input_shape=[1, 8],
                      config_overrides={"n_layers": "1"})


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_apply_llama_replaces_each_kind_and_matches(tmp_path, llama):
    wd = make_workdir(tmp_path / "wd", llama_problems())
    before = dict(OP_CALLS)
    patched = autokernel.apply(llama.model, wd)
    kinds = {kind for _, kind in patched._autokernel_replaced}
    assert kinds == {"rmsnorm", "add_rmsnorm", "swiglu", "rotary", "attention"}
    assert ("norm", "add_rmsnorm") in patched._autokernel_replaced
    assert ("layers.0.attn", "attention") in patched._autokernel_replaced
    # the user's model is left as it was
    assert type(llama.model.norm).__name__ == "RMSNorm"
    assert not hasattr(llama.model, "_autokernel_replaced")
    assert patched.state_dict().keys() == llama.model.state_dict().keys()
    with torch.no_grad():
        x = llama.make_inputs(3)
        ref, out = llama.model(*x), patched(*x)
    assert rel(out, ref) < 1e-4
    calls = {name: OP_CALLS[op] - before.get(op, 0) for name, op in patched._autokernel_ops.items()}
    assert calls == {"rmsnorm": 1, "add_rmsnorm": 2, "swiglu": 1, "rotary": 2, "attention": 1}


def test_apply_then_torch_compile_matches(tmp_path, llama):
    wd = make_workdir(tmp_path / "wd", llama_problems())
    patched = apply(llama.model, wd)
    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)  # fullgraph: no graph break
    before = dict(OP_CALLS)
    with torch.no_grad():
        x = llama.make_inputs(5)
        out, ref = compiled(*x), llama.model(*x)
    assert rel(out, ref) < 1e-4
    # the kernels ran inside the compiled graph, as opaque custom ops
    assert all(OP_CALLS[op] > before.get(op, 0) for op in patched._autokernel_ops.values())


class LookAlikeRMSNorm(nn.Module):
    """Named like an RMSNorm, but centres the rows first (a LayerNorm without bias)."""

    def __init__(self, n: int):
        super().__init__()
        self.eps = 1e-6
        self.weight = nn.Parameter(torch.randn(n) * 0.1)

    def forward(self, x):
        x32 = x.float()
        x32 = x32 - x32.mean(-1, keepdim=True)
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


class GemmaStyleRMSNorm(LookAlikeRMSNorm):
    """Gemma's RMSNorm: scales by (1 + weight), its weights start at zero."""

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)).to(x.dtype)


class TwoLayer(nn.Module):
    def __init__(self, norm: type = LookAlikeRMSNorm):
        super().__init__()
        self.norm = norm(32)
        self.fc1 = nn.Linear(32, 48)
        self.fc2 = nn.Linear(48, 32, bias=False)

    def forward(self, x):
        return self.fc2(self.fc1(self.norm(x)))


def test_gemma_rmsnorm_gets_one_plus_its_weight(tmp_path):
    """Gemma's ``x / rms(x) * (1 + w)``: the op gets ``1 + w``, computed at each call, so a weight
    changed in place is used at once."""
    model = TwoLayer(GemmaStyleRMSNorm)
    wd = make_workdir(tmp_path / "wd", [PlanProblem("rmsnorm", "rmsnorm", "fp32", [{"M": 4, "N": 32}], [1], 1.0, 0.5)])
    patched = apply(model, wd)
    assert patched._autokernel_replaced == [("norm", "rmsnorm")]
    x = torch.randn(4, 32)
    before = dict(OP_CALLS)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
        for m in (model, patched):
            m.norm.weight.add_(0.5)
        assert rel(patched(x), model(x)) < 1e-5
    assert OP_CALLS[patched._autokernel_ops["rmsnorm"]] - before.get(patched._autokernel_ops["rmsnorm"], 0) == 2


class LayerNorm1P(nn.LayerNorm):
    """Nemotron's ``NemotronLayerNorm1P``: an ``nn.LayerNorm`` whose own forward scales by ``1 + w``."""

    def forward(self, x):
        return nn.functional.layer_norm(x, self.normalized_shape, self.weight + 1.0, self.bias, self.eps)


class LayerNormTimesTwo(nn.LayerNorm):  # its own forward, another function
    def forward(self, x):
        return nn.functional.layer_norm(x, self.normalized_shape, self.weight * 2.0, self.bias, self.eps)


class LayerNormWithResidual(LayerNorm1P):  # norm(x, residual): the add_layernorm appliers' form
    def forward(self, x, residual=None):
        return LayerNorm1P.forward(self, x if residual is None else x + residual)


@pytest.mark.parametrize("norm,placed", [(LayerNorm1P, True), (LayerNormTimesTwo, False),
                                         (LayerNormWithResidual, False)],
                         ids=["one-plus-w", "two-w", "takes-a-residual"])
def test_a_layernorm_subclass_with_its_own_forward_is_probed(norm, placed, tmp_path):
    """A LayerNorm1P (``1 + w``) gets ``w + 1``, computed at each call (a weight changed in place is
    used at once); one computing something else is left alone (probe mismatch), and so is one whose
    forward takes a residual (not this applier's)."""
    model = TwoLayer(lambda n: norm(n, eps=1e-5))
    with torch.no_grad():
        model.norm.weight.normal_(0, 0.1)  # zero-centred, as LayerNorm1P's are
        model.norm.bias.normal_(0, 0.1)
    wd = make_workdir(tmp_path / "wd", [PlanProblem("layernorm", "layernorm", "fp32", [{"M": 4, "N": 32}], [1], 1.0, 0.5,
                                                    ["norm"])])
    patched = apply(model, wd)
    assert patched._autokernel_replaced == ([("norm", "layernorm")] if placed else [])
    if not placed:
        assert any(name == "norm" for name, _ in patched._autokernel_skipped), patched._autokernel_skipped
        return
    x = torch.randn(4, 32)
    op = patched._autokernel_ops["layernorm"]
    before = OP_CALLS[op]
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
        for m in (model, patched):
            m.norm.weight.add_(0.5)
        assert rel(patched(x), model(x)) < 1e-5
    assert OP_CALLS[op] - before == 2


def test_lookalike_module_and_other_dtype_are_left_alone(tmp_path):
    model = TwoLayer()
    wd = make_workdir(tmp_path / "wd", [PlanProblem("rmsnorm", "rmsnorm", "fp32", [{"M": 4, "N": 32}], [1], 1.0, 0.5)])
    patched = apply(model, wd)
    assert patched._autokernel_replaced == []
    assert any("probe mismatch" in reason for _, reason in patched._autokernel_skipped)
    assert type(patched.norm) is LookAlikeRMSNorm

    wd2 = make_workdir(tmp_path / "wd2", [PlanProblem("swiglu", "swiglu", "bf16", [{"M": 4, "N": 32}], [1], 1.0, 0.5)])
    patched = apply(TwoLayer(), wd2)  # a bf16 kernel, an fp32 model: nowhere to put it
    assert patched._autokernel_replaced == []
    assert patched._autokernel_skipped


def _results(speedup: float) -> str:
    head = "experiment\tproblem\tagent\tstatus\tfailed_stage\tlatency_us\tspeedup_vs_eager\tspeedup_vs_start\n"
    return (head + f"0\tmatmul\ttuner\tbaseline\t\t100\t0.5\t1\n"
            f"1\tmatmul\ttuner\tkeep\t\t{100 / speedup}\t{0.5 * speedup}\t{speedup}\n")


def test_linears_switched_only_when_a_kept_matmul_beat_the_start(tmp_path):
    mm = [PlanProblem("matmul", "matmul", "fp32", [{"M": 4, "N": 48, "K": 32}], [1], 1.0, 0.5, ["fc1", "fc2"])]
    model = TwoLayer()
    same = apply(model, make_workdir(tmp_path / "a", mm, results=_results(1.0)))
    assert same._autokernel_replaced == []
    assert "faster than the starting kernel" in same._autokernel_skipped[0][1]

    faster = apply(model, make_workdir(tmp_path / "b", mm, results=_results(1.3)))
    assert sorted(faster._autokernel_replaced) == [("fc1", "matmul"), ("fc2", "matmul")]
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        assert rel(faster(x), model(x)) < 1e-4


def test_a_layernorm_without_bias_gets_zeros(tmp_path):
    model = nn.Sequential(nn.Linear(32, 32), nn.LayerNorm(32, bias=False))
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
    ln = [PlanProblem("layernorm", "layernorm", "fp32", [{"M": 4, "N": 32}], [1], 1.0, 0.5, ["1"])]
    patched = apply(model, make_workdir(tmp_path / "wd", ln))
    assert patched._autokernel_replaced == [("1", "layernorm")]
    x = torch.randn(4, 32)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5
    assert "_autokernel_zero_bias" not in patched.state_dict()


class WeightlessLayerNorm(nn.Module):
    """OLMo's LayerNorm: no weight, no bias, its eps written in its forward, computed in fp32."""

    def __init__(self, n: int, eps: float):
        super().__init__()
        self.normalized_shape = (n,)
        self._eps = eps  # not an eps attribute the appliers read

    def forward(self, x):
        return nn.functional.layer_norm(x.float(), self.normalized_shape, None, None, self._eps).to(x.dtype)


@pytest.mark.parametrize("eps", [1e-5, 1e-6])
def test_a_layernorm_without_weight_gets_ones_and_its_eps_from_a_probe(tmp_path, eps):
    model = nn.Sequential(nn.Linear(32, 32), WeightlessLayerNorm(32, eps), nn.Linear(32, 32),
                          nn.LayerNorm(32, elementwise_affine=False))
    ln = [PlanProblem("layernorm", "layernorm", "fp32", [{"M": 4, "N": 32}], [2], 1.0, 0.5, ["1", "3"])]
    patched = apply(model, make_workdir(tmp_path / "wd", ln))
    assert sorted(patched._autokernel_replaced) == [("1", "layernorm"), ("3", "layernorm")]
    # rows of small variance, where the eps decides the output
    for x in (torch.randn(4, 32), 1e-3 * torch.randn(4, 32)):
        with torch.no_grad():
            assert rel(patched(x), model(x)) < 1e-5
    assert "_autokernel_unit_weight" not in patched.state_dict()

class MatmulLinear(nn.Linear):
    """Falcon's FalconLinear: ``x @ W.T + b`` in a forward of its own."""

    def forward(self, x):
        return x @ self.weight.T + self.bias


class ShiftedLinear(nn.Linear):
    def forward(self, x):
        return super().forward(x) + 1.0


def test_a_linear_subclass_is_switched_when_its_forward_computes_a_linear(tmp_path):
    model = nn.Sequential(MatmulLinear(32, 48), ShiftedLinear(48, 32))
    mm = [PlanProblem("matmul", "matmul", "fp32", [{"M": 4, "N": 48, "K": 32}], [1], 1.0, 0.5, ["0", "1"])]
    patched = apply(model, make_workdir(tmp_path / "wd", mm, results=_results(1.3)))
    assert patched._autokernel_replaced == [("0", "matmul")]
    x = torch.randn(4, 32)
    with torch.no_grad():
        assert rel(patched(x), model(x)) < 1e-5

class PatchEmbed(nn.Module):
    """ViT's patch embedding: a convolution whose stride is its kernel, flattened to rows."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 16, 4, stride=4)
        self.fc = nn.Linear(16, 8)

    def forward(self, pixels):
        return self.fc(self.proj(pixels).flatten(2).transpose(1, 2))


def test_a_patch_convolution_is_switched_as_the_gemm_of_its_patches(tmp_path):
    """The profiler counts ViT's patch convolution as a matmul over the patches; apply switches it
    too (it used to leave the Conv2d as it was, while the plan counted it covered)."""
    mm = [PlanProblem("matmul", "matmul", "fp32", [{"M": 32, "N": 16, "K": 48}, {"M": 32, "N": 8, "K": 16}], [1, 1],
                      1.0, 0.5, ["proj", "fc"])]
    model = PatchEmbed()
    patched = apply(model, make_workdir(tmp_path / "wd", mm, results=_results(1.3)))
    assert sorted(patched._autokernel_replaced) == [("fc", "matmul"), ("proj", "matmul")]
    op = patched._autokernel_ops["matmul"]
    for pixels in (torch.randn(2, 3, 16, 16), torch.randn(1, 3, 8, 12)):
        before = OP_CALLS[op]
        with torch.no_grad():
            assert rel(patched(pixels), model(pixels)) < 1e-5
        assert OP_CALLS[op] - before == 2
    with torch.no_grad():  # a size the patches do not tile: the convolution's own forward
        odd = torch.randn(1, 3, 10, 8)
        assert rel(patched.proj(odd), model.proj(odd)) < 1e-6

def test_a_kernel_slower_than_the_problems_eager_op_is_applied_where_the_model_runs_slower_code(tmp_path):
    """GPT-2 writes its GELU as eight element-wise kernels; the linear_gelu problem's eager op is
    addmm and one GELU.  A kernel slower than the latter but faster than what the model runs at
    that place is applied; one slower than both is not (times per forward, GPU plans only)."""
    from autokernel.integrate import select_kernels

    head = "experiment\tproblem\tagent\tstatus\tfailed_stage\tlatency_us\tspeedup_vs_eager\tspeedup_vs_start\n"
    rows = head + "0\trmsnorm\ttuner\tbaseline\t\t300\t0.95\t1\n"  # 300 us a forward, 0.95x the eager op

    def selected(model_us: float):
        problem = PlanProblem("rmsnorm", "rmsnorm", "fp32", [{"M": 8, "N": 64}], [2], model_us, 0.3, ["norm"])
        wd = make_workdir(tmp_path / f"wd{model_us:g}", [problem], results=rows, time_kind="gpu")
        from autokernel.plan import load_plan

        return select_kernels(wd, load_plan(wd / "plan.json"), device=torch.device("cpu"))

    applied = selected(700.0)  # the model's own ops there: 700 us a forward
    assert [k.problem.name for k in applied.ops] == ["rmsnorm"] and applied.skipped == []
    left_out = selected(250.0)
    assert left_out.ops == [] and "slower than PyTorch eager (0.95x)" in left_out.skipped[0][1]
    assert "300.0 against 250.0 us" in left_out.skipped[0][1]
    unknown = selected(0.0)  # no profile of the model's time: the eager op decides
    assert unknown.ops == []


def test_a_rejected_starting_kernel_is_not_applied(tmp_path, llama):
    head = "experiment\tproblem\tagent\tstatus\tfailed_stage\tlatency_us\tspeedup_vs_eager\tspeedup_vs_start\n"
    wd = make_workdir(tmp_path / "wd", llama_problems()[:1],
                      results=head + "0\trmsnorm\ttuner\tbaseline\tsmoke\t\t\t\n")
    patched = apply(llama.model, wd)
    assert patched._autokernel_replaced == []
    assert "no correct kernel" in patched._autokernel_skipped[0][1] and "failed at: smoke" in patched._autokernel_skipped[0][1]
    # a problem the budget never reached was not "incorrect" (a new user read it so)
    wd2 = make_workdir(tmp_path / "wd2", llama_problems()[:2],
                       results=head + "0\trmsnorm\ttuner\tbaseline\t\t10.0\t1.0\t1.0\n")
    skipped = dict(apply(llama.model, wd2)._autokernel_skipped)
    assert skipped[llama_problems()[1].name].startswith("never evaluated: the run's budget ended before its turn")


def test_a_kept_matmul_whose_start_failed_says_there_is_nothing_to_compare_with(tmp_path):
    """hf:gpt2's starting matmul kernel timed out, a later one was kept: verify said "no kept kernel
    faster than the starting kernel" though there was one."""
    head = "experiment\tproblem\tagent\tstatus\tfailed_stage\tlatency_us\tspeedup_vs_eager\tspeedup_vs_start\n"
    mm = [PlanProblem("matmul", "matmul", "fp32", [{"M": 4, "N": 48, "K": 32}], [1], 1.0, 0.5, ["fc1", "fc2"])]
    wd = make_workdir(tmp_path / "wd", mm, results=head + "0\tmatmul\ttuner\tbaseline\tnumerics\t\t\t\n"
                                                   "1\tmatmul\ttuner\tkeep\t\t50.0\t0.9\t\n")
    skipped = dict(apply(TwoLayer(), wd)._autokernel_skipped)
    assert skipped["matmul"] == "the starting kernel has no time to compare the kept one with (it failed at numerics)"


def test_a_matmul_left_out_is_named_once(tmp_path):
    """hf:granite on CPU, its matmul start judged and nothing kept: verify said "skipped matmul:
    matmul: no kept kernel faster...", the report "Not applied: matmul (matmul: no kept ...)"."""
    head = "experiment\tproblem\tagent\tstatus\tfailed_stage\tlatency_us\tspeedup_vs_eager\tspeedup_vs_start\n"
    mm = [PlanProblem("matmul", "matmul", "fp32", [{"M": 4, "N": 48, "K": 32}], [1], 1.0, 0.5, ["fc1", "fc2"])]
    wd = make_workdir(tmp_path / "wd", mm, results=head + "0\tmatmul\ttuner\tbaseline\t\t50.0\t\t1.0\n")
    why = dict(apply(TwoLayer(), wd)._autokernel_skipped)["matmul"]
    assert why.startswith("no kept kernel faster than the starting kernel"), why
    # a CPU run's model multiplies with the CPU's BLAS: hf:whisper's CPU verify said "is cuBLAS"
    assert why.endswith("the model's own matmul is the CPU's BLAS library (cuBLAS on a GPU))"), why


def test_a_problem_with_no_place_says_so_not_unsupported(tmp_path):
    """hf:cohere2: its rotary_table, left out by the profile's placement check, was skipped as "not
    supported by autokernel", a kind autokernel supports; the plan's note said why."""
    mm = PlanProblem("matmul", "matmul", "fp32", [{"M": 4, "N": 48, "K": 32}], [1], 1.0, 0.5, ["fc1", "fc2"])
    note = "rotary_table: no place in the model where it applies (found in rotary_emb); cos/sin tables"
    table = PlanProblem("rotary_table", "rotary_table", "fp32", [{"B": 1, "S": 8, "D": 32}], [1], 1.0, 0.1,
                        ["rotary_emb"], supported=False, note=note)
    skipped = dict(apply(TwoLayer(), make_workdir(tmp_path / "wd", [mm, table]))._autokernel_skipped)
    assert skipped["rotary_table"] == note.removeprefix("rotary_table: "), skipped


def test_a_timed_out_evaluation_is_reported_as_a_timeout_not_a_failed_stage(tmp_path, llama):
    """hf:whisper on CPU: the starting kernels' evaluations timed out (the interpreter too slow
    for the model's shapes) during numerics; verify, apply and report.md said "failed at:
    numerics" and "it failed at numerics", a verdict the harness never gave.  The row the loop
    writes says ``timeout``, and the skip reasons say the evaluation timed out, also for the
    rows of older files (the stage in failed_stage, the timeout in the status or description)."""
    from autokernel.harness.records import Evaluation
    from autokernel.loop.optimize import baseline_description
    from autokernel.loop.results import HEADER, ExperimentRecord, timed_out
    from autokernel.loop.verdict import make_record

    def row(name: str, experiment: int, status: str) -> str:
        ev = Evaluation(problem=name, kernel_file="k.py", correct=False, verdict="timeout", failed_stage="numerics",
                        message="no answer within 10 s during stage numerics: the worker was killed")
        description = baseline_description(ev, 10.0, "cpu") if status == "baseline" else "a candidate"
        record = make_record(None, name, None, None, experiment, "tuner", status, ev, 12.0, 0, "abc", description)
        assert record.failed_stage == "timeout" and timed_out(record) and not record.correct
        return record.to_line()

    norm = llama_problems()[:1]
    wd = make_workdir(tmp_path / "wd", norm,
                      results=HEADER + row("rmsnorm", 0, "baseline") + row("rmsnorm", 1, "timeout"))
    why = dict(apply(llama.model, wd)._autokernel_skipped)["rmsnorm"]
    assert "timed out" in why and "the interpreter is too slow for these shapes" in why, why
    assert "numerics" not in why and "failed at" not in why, why

    head = ("experiment\tproblem\tagent\tstatus\tfailed_stage\tlatency_us\tspeedup_vs_eager\tspeedup_vs_start\t"
            "description\n")
    old = head + ("0\trmsnorm\ttuner\tbaseline\tnumerics\t\t\t\tstarting kernel (timeout after 10 s per request; the "
                  "interpreter is too slow for these shapes: not a verdict on the kernel)\n"
                  "1\trmsnorm\ttuner\ttimeout\tnumerics\t\t\t\ta candidate\n")
    why = dict(apply(llama.model, make_workdir(tmp_path / "old", norm, results=old))._autokernel_skipped)["rmsnorm"]
    assert "timed out" in why and "numerics" not in why, why
    mixed = old + "2\trmsnorm\ttuner\tincorrect\tsmoke\t\t\t\tanother\n"  # a real failure is still named
    why = dict(apply(llama.model, make_workdir(tmp_path / "mixed", norm, results=mixed))._autokernel_skipped)["rmsnorm"]
    assert why.endswith("failed at: smoke, timed out)"), why

    mm = [PlanProblem("matmul", "matmul", "fp32", [{"M": 4, "N": 48, "K": 32}], [1], 1.0, 0.5, ["fc1", "fc2"])]
    for name, results in (("new", HEADER + row("matmul", 0, "baseline")
                           + ExperimentRecord(1, "matmul", "tuner", "keep", latency_us=50.0).to_line()),
                          ("old_mm", head + "0\tmatmul\ttuner\tbaseline\tnumerics\t\t\t\tstarting kernel (timeout "
                                            "after 10 s per request: not a verdict on the kernel)\n"
                                            "1\tmatmul\ttuner\tkeep\t\t50.0\t0.9\t\tfaster\n")):
        why = dict(apply(TwoLayer(), make_workdir(tmp_path / name, mm, results=results))._autokernel_skipped)["matmul"]
        assert why == ("the starting kernel has no time to compare the kept one with (its evaluation timed "
                       "out: the interpreter is too slow for these shapes, not a verdict on the kernel)"), why


def test_apply_needs_a_plan(tmp_path):
    with pytest.raises(IntegrateError, match="plan.json"):
        apply(TwoLayer(), tmp_path)
    with pytest.raises(IntegrateError, match="nn.Module"):
        apply(object(), tmp_path)


def test_rotary_op_reads_projection_layout_in_place_and_keeps_it(tmp_path):
    """q/k come out of the attention projections as view(B, S, H, D).transpose(1, 2): the rotary
    op reads them without a copy and returns that layout (so SDPA's output needs no copy before
    the output projection either); the fake gives torch.compile the same strides."""
    from autokernel.integrate import keeps_layout, register_kernel_op
    from autokernel.problems import get_problem

    _, op = register_kernel_op("rotary", "rotary", KERNELS_DIR / "rotary.py")
    problem = get_problem("rotary")
    x, cos, sin = problem.make_inputs({"B": 2, "H": 3, "S": 5, "D": 16}, torch.float32, "cpu", 0)
    q = x.transpose(1, 2).contiguous().transpose(1, 2)  # same values, projection layout
    assert keeps_layout("rotary", (q, cos, sin)) and not keeps_layout("rotary", (x, cos, sin))
    out = op(q, cos, sin)
    assert out.stride() == q.stride()
    torch.testing.assert_close(out, problem.reference(x, cos, sin))
    assert op(x, cos, sin).is_contiguous()
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fq = mode.from_tensor(q)
        assert op(fq, mode.from_tensor(cos), mode.from_tensor(sin)).stride() == q.stride()
    # a kernel that returns a contiguous result anyway is given the promised layout
    contiguous_out = (KERNELS_DIR / "rotary.py").read_text().replace(
        "    return out\n", "    return out.contiguous()\n")
    path = tmp_path / "rotary_contiguous.py"
    path.write_text(contiguous_out)
    _, op2 = register_kernel_op("rotary", "rotary_c", path)
    out2 = op2(q, cos, sin)
    assert out2.stride() == q.stride()
    torch.testing.assert_close(out2, out)


def test_attention_op_reads_packed_projections_in_place_and_returns_heads_inside_tokens(tmp_path):
    """GPT-2 splits one packed q|k|v projection and views each part as (B, H, S, D): the attention
    op hands those views to the kernel as they are (no copies) and returns the output with heads
    inside tokens, so the model's transpose(1, 2).contiguous() before the output projection is
    free; the fake promises torch.compile the same strides."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autokernel.integrate import register_kernel_op
    from autokernel.problems import get_problem
    from autokernel.problems.attention import packed_qkv

    recording = (KERNELS_DIR / "attention.py").read_text().replace(
        "def kernel_fn(q, k, v, causal=True, scale=None):\n",
        "SEEN = []\n\n\ndef kernel_fn(q, k, v, causal=True, scale=None):\n    SEEN.append((q.stride(), k.stride(), v.stride()))\n")
    path = tmp_path / "attention_recording.py"
    path.write_text(recording)
    _, op = register_kernel_op("attention", "attention_rec", path)
    problem = get_problem("attention")
    shape = {"B": 2, "H": 4, "Hkv": 2, "S": 5, "D": 16, "causal": 1}
    q, k, v, causal, _ = problem.make_inputs(shape, torch.float32, "cpu", 0)
    pq, pk, pv = packed_qkv(q, k, v)
    out = op(pq, pk, pv, causal, None)
    seen = next(m for name, m in sys.modules.items() if name.startswith("autokernel_applied.attention_rec_")).SEEN
    assert seen[-1] == (pq.stride(), pk.stride(), pv.stride())
    assert out.transpose(1, 2).is_contiguous()
    torch.testing.assert_close(out, problem.reference(q, k, v, causal), atol=1e-4, rtol=1e-4)
    assert op(q, k, v, causal, None).is_contiguous()  # a contiguous q: a contiguous output
    with FakeTensorMode() as mode:
        fake = op(*(mode.from_tensor(t) for t in (pq, pk, pv)), causal, None)
        assert fake.stride() == out.stride()


def test_attention_kernel_that_assumes_contiguous_inputs_fails_the_layout_cases():
    """The numerics stage's layout cases catch a kernel that indexes q/k/v as if contiguous
    (the integration passes projection views as they are)."""
    import importlib.util

    from autokernel.problems import get_problem

    source = (KERNELS_DIR / "attention.py").read_text()
    bad = source.replace("*q.stride(), *k.stride(), *v.stride(),",
                         "H * S * D, S * D, D, 1, Hkv * S * D, S * D, D, 1, Hkv * S * D, S * D, D, 1,")
    assert bad != source
    problem = get_problem("attention")
    spec = importlib.util.spec_from_loader("attention_contiguous_only", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(bad, "attention_contiguous_only.py", "exec"), module.__dict__)
    shape = {"B": 1, "H": 2, "Hkv": 1, "S": 6, "D": 16, "causal": 1}
    failed = set()
    for name, args in problem.adversarial_inputs(shape, torch.float32, "cpu", 0):
        ref = problem.reference(*[a.contiguous() if isinstance(a, torch.Tensor) else a for a in args])
        if not torch.allclose(module.kernel_fn(*args), ref, atol=1e-3, rtol=1e-3):
            failed.add(name)
    assert failed == {"projection-layout", "packed-qkv-layout"}, failed


def test_misaligned_half_precision_linear_is_padded_and_gives_the_same_values():
    """cuBLAS runs slow kernels when output rows are not 16-byte aligned (GPT-2's 50257-wide LM
    head); the padded linear computes the same values on aligned rows and returns a view."""
    from autokernel.integrate.alignment import align_linears

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 1030).to(torch.bfloat16), nn.Linear(16, 2048).to(torch.bfloat16),
                          nn.Linear(16, 1030, bias=False).to(torch.bfloat16))
    x = torch.randn(3, 5, 16, dtype=torch.bfloat16)
    want = [m(x) for m in model]
    keys = set(model.state_dict())
    replaced: list = []
    align_linears(model, set(), replaced, on_gpu=False)
    assert replaced == []  # on the CPU alignment costs nothing: left alone
    align_linears(model, set(), replaced, on_gpu=True)
    assert replaced == [("0", "aligned-linear"), ("2", "aligned-linear")]  # 2048 is aligned already
    for m, ref in zip(model, want):
        out = m(x)
        assert out.shape == ref.shape
        torch.testing.assert_close(out, ref, atol=0, rtol=0)
    assert model[0](x).stride()[-2] == 1032 and isinstance(model[0], nn.Linear)
    assert set(model.state_dict()) == keys


def test_eager_calls_skip_the_dispatcher_but_tracing_profiling_and_autograd_do_not():
    """Plain eager calls of our ops go straight to the kernel (the dispatcher's Python path cost
    more host time than the launch); everything that must see the op still does."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autokernel.integrate.ops import needs_dispatcher

    x, w = torch.randn(2, 3), nn.Parameter(torch.randn(3))
    assert not needs_dispatcher((x, 1e-6))
    assert needs_dispatcher((x, w, 1e-6))  # a weight that requires grad: autograd would record it
    with torch.inference_mode():
        assert not needs_dispatcher((x, w, 1e-6))
    with torch.no_grad():
        assert not needs_dispatcher((x.requires_grad_(), w))
    with FakeTensorMode() as mode:
        assert needs_dispatcher((mode.from_tensor(torch.randn(2)),))
    with torch.profiler.profile():
        assert needs_dispatcher((torch.randn(2),))


def test_the_nothing_replaced_warning_names_every_problem_once_per_reason():
    """It listed 5 of 7 problems without a word of the others, and doubled 'matmul: matmul: ...'."""
    from autokernel.provenance import nothing_replaced_warning

    why = "the model is on CPU and TRITON_INTERPRET=1 is not set"
    names = ["rmsnorm", "swiglu", "rotary", "attention", "add_rmsnorm", "embedding", "rotary_table"]
    text = nothing_replaced_warning([(n, why) for n in names] + [("matmul", "matmul: no kept kernel faster")])
    assert f"{', '.join(names)}: {why}" in text
    assert "matmul: no kept kernel faster" in text and "matmul: matmul" not in text


class ChannelsLayerNorm(nn.LayerNorm):
    """ConvNeXt's LayerNorm: ``nn.LayerNorm``'s own forward on a permuted input for channels-first
    features, as it is for channels-last ones."""

    def __init__(self, n: int, channels_first: bool):
        super().__init__(n, eps=1e-6)
        self.channels_first = channels_first

    def forward(self, x):
        if self.channels_first:
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return super().forward(x)


class OwnLayerNorm(nn.LayerNorm):
    """A LayerNorm subclass that never calls ``nn.LayerNorm.forward`` (Nemotron's ``1 + w`` form):
    left alone before 2026-12-06, probed (``1 + w``) and switched since."""

    def forward(self, x):
        return nn.functional.layer_norm(x, self.normalized_shape, self.weight + 1, self.bias, self.eps)


def test_a_layernorm_subclass_calling_the_base_forward_gets_the_kernel_in_its_place(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 16, 1), ChannelsLayerNorm(16, channels_first=True), ChannelsFirstToLast(),
                          ChannelsLayerNorm(16, channels_first=False), OwnLayerNorm(16))
    with torch.no_grad():
        for m in (model[1], model[3], model[4]):
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-0.5, 0.5)
    ln = [PlanProblem("layernorm", "layernorm", "fp32", [{"M": 32, "N": 16}], [3], 1.0, 0.5, ["1", "3", "4"])]
    patched = apply(model, make_workdir(tmp_path / "wd", ln))
    assert sorted(patched._autokernel_replaced) == [("1", "layernorm"), ("3", "layernorm"), ("4", "layernorm")]
    before = sum(OP_CALLS.values())
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad():
        out = patched(x)
    assert sum(OP_CALLS.values()) - before == 3  # each replaced norm ran the kernel
    with torch.no_grad():
        assert rel(out, model(x)) < 1e-5


class ChannelsFirstToLast(nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 3, 1)
