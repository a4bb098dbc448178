"""KernelBench files judged as KernelBench means them, and stricter where it matters
(problems/kernelbench.py, problems/kb_sizes.py).

Most tests use the problem object directly (no worker); a few judge solution files through the
harness on the CPU (Triton interpreter) at sizes shrunk with ``scale``.  The unmodified
KernelBench files live next to the repository (``../shared/kernelbench``); tests that need
them are skipped when it is absent.
"""
from __future__ import annotations

import importlib.util
import os
import random
import textwrap
from pathlib import Path

import pytest
import torch

from autokernel.problems import ProblemError, get_problem
from autokernel.problems import kb_sizes
from autokernel.problems.kernelbench import KernelBenchOptions, SizeError, load_kernelbench

ROOT = Path(__file__).resolve().parent.parent
# CI: the clone's sibling ../shared/kernelbench; KERNELBENCH_DIR points elsewhere (a local checkout).
KERNELBENCH = Path(os.environ.get("KERNELBENCH_DIR") or ROOT.parent / "shared" / "kernelbench")
SOLUTIONS = ROOT / "tests" / "kernelbench_solutions"
needs_kernelbench = pytest.mark.skipif(not (KERNELBENCH / "level1").is_dir(),
                                       reason=f"the KernelBench problem files are not at {KERNELBENCH}")
SMALL = KernelBenchOptions(scale=0.005)
TINY = KernelBenchOptions(scale=0.001)


def _write(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hp(args):
    return tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


# ------------------------------------------------------------------ sizes (pure)
SOURCE = textwrap.dedent("""
    import torch
    batch_size = 4096
    dim = 1
    in_channels = 64
    groups = 8
    kernel_size = 3
    N = 2048 * 2
    input_shape = (batch_size, N)
    flag = True
    def get_inputs():
        return [torch.rand(*input_shape)]
""")


def test_size_constants_are_the_large_integers_that_are_not_op_settings():
    namespace: dict = {}
    exec(SOURCE, namespace)
    constants = kb_sizes.int_constants(SOURCE, namespace)
    assert constants == {"batch_size": 4096, "dim": 1, "in_channels": 64, "groups": 8, "kernel_size": 3, "N": 4096}
    assert kb_sizes.size_names(constants) == ("batch_size", "in_channels", "N")


def test_scaling_floors_and_keeps_divisibility_when_asked():
    constants = {"batch_size": 4096, "in_channels": 64, "groups": 8, "N": 4096}
    names = ("batch_size", "in_channels", "N")
    small = kb_sizes.scaled(constants, names, 0.01)
    assert small == {"batch_size": 41, "in_channels": 8, "groups": 8, "N": 41}
    moved = kb_sizes.moved(constants, names, random.Random(3))
    assert all(moved[n] % 2 == 1 and moved[n] != constants[n] for n in names) and moved["groups"] == 8
    kept = kb_sizes.keep_divisibility(constants, {**constants, "in_channels": 71}, names)
    assert kept["in_channels"] == 72 and kept["in_channels"] % kept["groups"] == 0
    assert kb_sizes.describe(constants, small) == "batch_size 4096->41, in_channels 64->8, N 4096->41"


def test_new_constants_flow_into_the_values_computed_from_them():
    text = kb_sizes.with_constants(SOURCE, {"batch_size": 5, "N": 7})
    namespace: dict = {}
    exec(text, namespace)
    assert namespace["input_shape"] == (5, 7) and namespace["get_inputs"]()[0].shape == (5, 7)


# ------------------------------------------------------------- the problem object
def test_example_file_sizes_are_the_shape_and_heldout_moves_them():
    problem = get_problem(str(ROOT / "examples" / "kernelbench_example.py"))
    assert problem.dims == ("batch_size", "in_features", "out_features")
    shape = problem.cpu_shapes[0]
    assert shape == {"batch_size": 48, "in_features": 80, "out_features": 72}
    held = problem.heldout_shape(dict(shape), random.Random(0))
    assert held != shape and all(v % 2 for v in held.values())
    args = problem.make_inputs(held, torch.float32, "cpu", 1)
    assert args[0].shape == (held["batch_size"], held["in_features"])
    assert problem.reference(*_hp(args)).shape == (held["batch_size"], held["out_features"])
    # defaults: no PyTorch compute in ModelNew, KernelBench's fp32 tolerance
    assert problem.forbidden_ops is None and not problem.allowed_ops
    tol = problem.tolerance(torch.float32)
    assert (tol.atol, tol.rtol) == (1e-4, 1e-4)


def test_weights_are_drawn_per_case_and_handed_to_model_new():
    problem = get_problem(str(ROOT / "examples" / "kernelbench_example.py"))
    shape = problem.cpu_shapes[0]
    a, b = (problem.make_inputs(shape, torch.float32, "cpu", s) for s in (1, 2))
    weight_a, weight_b = a[1], b[1]
    assert weight_a.shape == (72, 80) and not torch.equal(weight_a, weight_b)
    assert torch.equal(weight_a, problem.make_inputs(shape, torch.float32, "cpu", 1)[1])
    module = _import(ROOT / "examples" / "kernelbench_example_kernel.py", "kb_example_kernel")
    run = problem.kernel_callable(module, shape, torch.float32, "cpu")
    for args in (a, b):
        assert torch.allclose(run(*args).double(), problem.reference(*_hp(args)), atol=1e-4)


def test_model_new_must_keep_models_parameters(tmp_path):
    problem = get_problem(str(ROOT / "examples" / "kernelbench_example.py"))
    shape = problem.cpu_shapes[0]
    renamed = _write(tmp_path, """
        import torch, torch.nn as nn
        class ModelNew(nn.Module):
            def __init__(self, i, o):
                super().__init__()
                self.w = nn.Parameter(torch.empty(o, i))
                self.b = nn.Parameter(torch.empty(o))
            def forward(self, x):
                return (x @ self.w.t() + self.b).clamp_min(0)
    """, "renamed.py")
    args = problem.make_inputs(shape, torch.float32, "cpu", 4)
    run = problem.kernel_callable(_import(renamed, "kb_renamed"), shape, torch.float32, "cpu")
    assert torch.allclose(run(*args).double(), problem.reference(*_hp(args)), atol=1e-4)  # matched by order
    missing = _write(tmp_path, """
        import torch.nn as nn
        class ModelNew(nn.Module):
            def __init__(self, i, o):
                super().__init__()
            def forward(self, x):
                return x
    """, "missing.py")
    with pytest.raises(AttributeError, match="do not match Model's"):
        problem.kernel_callable(_import(missing, "kb_missing"), shape, torch.float32, "cpu")


def test_random_reference_is_refused(tmp_path):
    path = _write(tmp_path, """
        import torch, torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.drop = nn.Dropout(0.2)
            def forward(self, x):
                return self.drop(x)
        batch_size = 16
        def get_inputs():
            return [torch.randn(batch_size, 32)]
        def get_init_inputs():
            return []
    """, "kb_dropout.py")
    with pytest.raises(ProblemError, match="random numbers in training mode"):
        get_problem(str(path))


def test_signed_draw_only_where_the_reference_stays_finite(tmp_path):
    log_file = _write(tmp_path, """
        import torch, torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return torch.log(x)
        batch_size = 16
        def get_inputs():
            return [torch.rand(batch_size, 8) + 0.5]
        def get_init_inputs():
            return []
    """, "kb_log.py")
    problem = get_problem(str(log_file))
    assert problem.adversarial_inputs(problem.cpu_shapes[0], torch.float32, "cpu", 1) == []


@needs_kernelbench
def test_relu_gets_a_signed_draw_and_allow_torch_gives_the_lenient_rule():
    path = KERNELBENCH / "level1" / "19_ReLU.py"
    problem = load_kernelbench(path, SMALL)
    shape = problem.cpu_shapes[0]
    assert shape == {"batch_size": 20, "dim": 1966} and "batch_size 4096->20" in problem.description
    ((name, args),) = problem.adversarial_inputs(shape, torch.float32, "cpu", 1)
    assert name == "signed" and bool((args[0] < 0).any()) and bool((args[0] > 0).any())
    lenient = load_kernelbench(path, KernelBenchOptions(scale=0.005, allow_torch=True, atol=1e-2, rtol=2e-2))
    assert "aten.relu" in lenient.forbidden_ops and "aten.empty" not in lenient.forbidden_ops
    tol = lenient.tolerance(torch.float32)
    assert (tol.atol, tol.rtol) == (1e-2, 2e-2)


@needs_kernelbench
def test_files_that_cannot_shrink_are_refused_with_the_reason():
    with pytest.raises(SizeError, match=r"batch_size 32768->164.*the reference fails"):
        load_kernelbench(KERNELBENCH / "level1" / "100_HingeLoss.py", KernelBenchOptions(scale=0.005))


@needs_kernelbench
def test_reference_runs_in_training_mode_with_drawn_norm_weights():
    problem = load_kernelbench(KERNELBENCH / "level1" / "33_BatchNorm.py", KernelBenchOptions(scale=0.02))
    args = problem.make_inputs(problem.cpu_shapes[0], torch.float32, "cpu", 3)
    x, weight, bias = args[0], args[1], args[2]
    assert not torch.allclose(weight, torch.ones_like(weight))  # ones at init: redrawn around them
    expected = torch.nn.functional.batch_norm(x.double(), None, None, weight.double(), bias.double(), training=True)
    assert torch.allclose(problem.reference(*_hp(args)), expected, atol=1e-8)


# ------------------------------------------------------------- through the judge
def _evaluate(problem, kernel_file, **kwargs):
    from autokernel.harness.evaluate import Evaluator

    with Evaluator(problem, device="cpu", timing=False, baselines=False, **kwargs) as evaluator:
        return evaluator.evaluate(kernel_file)


@needs_kernelbench
def test_torch_rewrite_of_cross_entropy_is_refused_unless_allow_torch(tmp_path):
    path = KERNELBENCH / "level1" / "95_CrossEntropyLoss.py"
    rewrite = _write(tmp_path, """
        import torch, torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, predictions, targets):
                lse = torch.logsumexp(predictions, dim=1)
                return (lse - predictions.gather(1, targets[:, None])[:, 0]).mean()
    """, "95_CrossEntropyLoss.py")
    strict = _evaluate(load_kernelbench(path, TINY), rewrite)
    assert strict.verdict == "rejected" and strict.integrity[0].rule == "torch-op", strict.message
    lenient = _evaluate(load_kernelbench(path, KernelBenchOptions(scale=0.001, allow_torch=True)), rewrite)
    assert lenient.correct, lenient.message


@needs_kernelbench
def test_honest_triton_cross_entropy_passes_and_baked_weights_fail():
    ce = _evaluate(load_kernelbench(KERNELBENCH / "level1" / "95_CrossEntropyLoss.py", TINY),
                   SOLUTIONS / "level1" / "95_CrossEntropyLoss.py")
    assert ce.correct, ce.message
    baked = _evaluate(load_kernelbench(KERNELBENCH / "level2" / "12_Gemm_Multiply_LeakyReLU.py", SMALL),
                      SOLUTIONS / "wrong" / "12_Gemm_Multiply_LeakyReLU.py")
    assert baked.verdict == "incorrect" and baked.failed_stage == "smoke", baked.message


def test_import_gets_its_own_time_budget_and_a_fresh_build_dir(tmp_path):
    """A slow import (a load_inline build) is not bound by the per-call timeout, and builds go
    to a directory of the evaluation's own that is gone afterwards (no stale lock)."""
    record = tmp_path / "build_dir.txt"
    slow = _write(tmp_path, f"""
        import os, time
        import torch.nn as nn
        build = os.environ["TORCH_EXTENSIONS_DIR"]
        open(os.path.join(build, "lock"), "w").close()  # what a killed build leaves behind
        open({str(record)!r}, "w").write(build)
        time.sleep(2.5)
        class ModelNew(nn.Module):
            def __init__(self, i, o):
                super().__init__()
                self.linear = nn.Linear(i, o)
    """, "slow.py")
    problem = get_problem(str(ROOT / "examples" / "kernelbench_example.py"))
    ev = _evaluate(problem, slow, timeout_s=1.0, compile_timeout_s=60.0, writable=[tmp_path])  # its record
    assert ev.verdict != "timeout" and ev.failed_stage != "load", ev.message
    build_dir = Path(record.read_text())
    assert build_dir.name.startswith("autokernel-build-") and not build_dir.exists()
    second = _evaluate(problem, slow, timeout_s=1.0, compile_timeout_s=60.0, writable=[tmp_path])
    assert Path(record.read_text()) != build_dir and second.failed_stage != "load", second.message


def test_malformed_files_are_problem_errors(tmp_path):
    no_init = _write(tmp_path, """
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return x
        def get_inputs():
            return []
    """, "kb_bad.py")
    with pytest.raises(ProblemError, match="get_init_inputs"):
        get_problem(str(no_init))
    problem = get_problem(str(ROOT / "examples" / "kernelbench_example.py"))
    empty = _write(tmp_path, "x = 1\n", "empty_kernel.py")
    with pytest.raises(AttributeError, match="ModelNew"):
        problem.kernel_callable(_import(empty, "kb_empty"), problem.cpu_shapes[0], torch.float32, "cpu")


def test_get_inputs_floats_vary_per_draw_with_their_sign_and_ints_stay():
    from autokernel.problems.kernelbench import vary_floats

    problem = load_kernelbench(ROOT / "tests" / "attacks_coverage" / "kb5_small_problem.py")
    shape = problem.cpu_shapes[0]
    scalars = [problem.make_inputs(shape, torch.float32, "cpu", seed)[1] for seed in range(6)]
    assert scalars == [problem.make_inputs(shape, torch.float32, "cpu", seed)[1] for seed in range(6)]
    assert len(set(scalars)) == 6 and all(0.5 * 3.14 <= s < 1.5 * 3.14 for s in scalars)
    varied = vary_floats([-2.0, 7, True, 0.0, float("inf")], 3)
    assert varied[0] < 0 and varied[0] != -2.0 and varied[1:4] == [7, True, 0.0] and varied[4] == float("inf")


@needs_kernelbench
def test_init_floats_alternate_between_the_files_values_and_a_second_set():
    """level2 12_Gemm_Multiply_LeakyReLU: multiplier and negative_slope come from
    get_init_inputs; the honest solution passes, one with the multiplier baked in fails."""
    from autokernel.problems.kernelbench import init_float_slots

    path = KERNELBENCH / "level2" / "12_Gemm_Multiply_LeakyReLU.py"
    problem = load_kernelbench(path, SMALL)
    assert init_float_slots(problem.kernelbench.module(problem.cpu_shapes[0])) == (2, 3)
    honest = SOLUTIONS / "level2" / "12_Gemm_Multiply_LeakyReLU.py"
    assert _evaluate(problem, honest).correct
    source = honest.read_text()
    assert "float(self.multiplier)" in source
    baked = Path(__import__("tempfile").mkdtemp()) / "baked_multiplier.py"
    baked.write_text(source.replace("float(self.multiplier)", "2.0"))
    ev = _evaluate(load_kernelbench(path, SMALL), baked)
    assert ev.verdict == "incorrect", ev.message
    # a float that changes Model's parameter shapes (MobileNet's width multiplier) is left alone
    from autokernel.problems.kernelbench import KernelBenchFile

    mobilenet = KernelBenchFile(KERNELBENCH / "level3" / "19_MobileNetV1.py")
    assert init_float_slots(mobilenet.module(mobilenet.file_shape())) == ()


def test_a_solution_without_model_new_is_refused_at_load(tmp_path):
    """A file with no ModelNew class (a kernel_fn file, a ModelNew that is not a class) fails
    at ``load`` with the reason, before any input is drawn: it failed at ``smoke`` as a kernel
    that raised."""
    problem = get_problem(str(ROOT / "examples" / "kernelbench_example.py"))
    for name, text in (("fn_only.py", "def kernel_fn(x):\n    return x\n"),
                       ("not_a_class.py", "def ModelNew(*args):\n    return None\n")):
        ev = _evaluate(problem, _write(tmp_path, text, name))
        assert ev.verdict == "incorrect" and ev.failed_stage == "load", (ev.failed_stage, ev.message)
        assert "no class ModelNew" in ev.message and "raised" not in ev.message, ev.message
