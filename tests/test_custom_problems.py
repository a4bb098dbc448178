"""User problem files, KernelBench problem files, and the `problems` / `starter` commands."""
from __future__ import annotations

import ast
import importlib.util
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from autokernel.problems import ProblemError, get_problem
from autokernel.problems.custom import load_problem_file

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------- autokernel format
def test_example_problem_file_loads_and_runs():
    problem = get_problem(str(EXAMPLES / "custom_problem.py"))
    assert problem.kind == "gelu_tanh" and problem.dims == ("M", "N")
    assert problem.cpu_shapes[0] == {"M": 16, "N": 64}
    assert problem.gpu_shapes[0] == {"M": 4096, "N": 3072}
    assert problem.cpu_edge_shapes == ({"M": 1, "N": 1}, {"M": 7, "N": 33})
    assert problem.dtypes == (torch.bfloat16, torch.float16, torch.float32)
    (x,) = problem.make_inputs(problem.cpu_shapes[0], torch.float16, "cpu", 5)
    (x_again,) = problem.make_inputs(problem.cpu_shapes[0], torch.float16, "cpu", 5)
    assert x.dtype == torch.float16 and torch.equal(x, x_again) and x.abs().sum() > 0
    y = problem.reference(x.double())
    assert torch.allclose(y, 0.5 * x.double() * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x.double() + 0.044715 * x.double() ** 3))))
    assert problem.bytes({"M": 2, "N": 3}, torch.float32) == 2 * 6 * 4
    assert [name for name, _ in problem.adversarial_inputs(problem.cpu_shapes[0], torch.bfloat16, "cpu", 1)] == ["tails", "tiny"]
    assert problem.make_kernel is None and problem.forbidden_ops is None  # allow-list mode


def _write(tmp_path: Path, text: str, name: str = "prob.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


MINIMAL = textwrap.dedent("""
    import torch
    DIMS = ["N"]
    SHAPES = [{"N": 1024}, "N=4096"]
    def reference(x):
        return x * 2 + 1
    def make_inputs(shape, dtype, device, seed):
        g = torch.Generator(device=device); g.manual_seed(seed)
        return (torch.randn(shape["N"], generator=g, device=device).to(dtype),)
""")


def test_minimal_file_gets_defaults(tmp_path):
    problem = load_problem_file(_write(tmp_path, MINIMAL, "scale_add.py"))
    assert problem.kind == "scale_add"
    assert problem.gpu_shapes == ({"N": 1024}, {"N": 4096}) and problem.cpu_shapes == problem.gpu_shapes
    assert problem.flops({"N": 8}) == 0
    # bytes measured on fake tensors: one input read, one output written
    assert problem.bytes({"N": 1000}, torch.bfloat16) == 2 * 1000 * 2
    assert problem.tolerance(torch.float16).atol > 0


def test_tolerances_and_fixed_dims_are_read(tmp_path):
    path = _write(tmp_path, MINIMAL + textwrap.dedent("""
    TOLERANCES = {"fp16": (1e-2, 2e-2, 3e-3), torch.float32: {"atol": 1e-5, "rtol": 1e-5, "max_rel_norm": 1e-6}}
    FIXED_DIMS = ("N",)
    DTYPES = ["fp32", "fp16"]
    """))
    problem = load_problem_file(path)
    assert problem.tolerance(torch.float16).max_rel_norm == 3e-3
    assert problem.tolerance(torch.float32).atol == 1e-5
    assert problem.fixed_dims == ("N",) and problem.dtypes == (torch.float32, torch.float16)


@pytest.mark.parametrize("text, fragment", [
    ("import torch\nDIMS = ['N']\n", "lacks SHAPES, reference, make_inputs"),
    ("def broken(:\n    pass\n", "SyntaxError"),
    ("import no_such_module_for_autokernel\n", "ModuleNotFoundError"),
    ("raise SystemExit(3)\n", "SystemExit"),
    (MINIMAL.replace('"N=4096"', '"N=4x"'), "bad entry in SHAPES"),
    (MINIMAL.replace('"N=4096"', '{"M": 3}'), "bad entry in SHAPES"),
    (MINIMAL + "\nDTYPES = ['int3']\n", "unknown dtype"),
    (MINIMAL + "\nTOLERANCES = {'fp16': (1, 2)}\n", "bad TOLERANCES"),
    (MINIMAL + "\nFIXED_DIMS = ('Q',)\n", "FIXED_DIMS"),
    (MINIMAL.replace("def reference(x):", "reference = 3\ndef _unused(x):"), "reference must be a function"),
])
def test_malformed_files_raise_one_line_problem_error(tmp_path, text, fragment):
    path = _write(tmp_path, text)
    with pytest.raises(ProblemError) as info:
        get_problem(str(path))
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_missing_file_is_problem_error(tmp_path):
    with pytest.raises(ProblemError, match="not found"):
        get_problem(str(tmp_path / "nope.py"))


# ------------------------------------------------------------------ KernelBench
def test_kernelbench_example_loads_and_model_new_matches():
    path = EXAMPLES / "kernelbench_example.py"
    problem = get_problem(str(path))
    assert problem.kind == "kernelbench:kernelbench_example"
    assert problem.dims == ("default",) and problem.cpu_shapes == ({"default": 0},)
    assert {"aten.addmm", "aten.mm", "aten.relu"} <= problem.forbidden_ops
    assert not problem.forbidden_ops & {"aten.empty", "aten.view", "aten.t", "aten.copy_"}
    shape = problem.cpu_shapes[0]
    assert problem.bytes(shape, torch.float32) == (48 * 80 + 48 * 72) * 4
    args = problem.make_inputs(shape, torch.float32, "cpu", 3)
    assert args[0].shape == (48, 80) and torch.equal(args[0], problem.make_inputs(shape, torch.float32, "cpu", 3)[0])
    kernel_module = _import(EXAMPLES / "kernelbench_example_kernel.py", "kb_kernel_for_test")
    fn = problem.kernel_callable(kernel_module, shape, torch.float32, "cpu")
    out = fn(*args)
    ref = problem.reference(*[a.double() for a in args])
    assert ref.dtype == torch.float64 and out.shape == ref.shape
    assert (out.double() - ref).abs().max() < 1e-4
    assert (ref > 0).any() and (ref == 0).any()  # the ReLU is exercised


def _kb_problem(tmp_path: Path) -> Path:
    return _write(tmp_path, """
        import torch, torch.nn as nn
        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.scale = nn.Parameter(torch.randn(n))
            def forward(self, x):
                return torch.softmax(x * self.scale, dim=-1)
        def get_inputs():
            return [torch.randn(4, 6)]
        def get_init_inputs():
            return [6]
    """, "kb_softmax.py")


def test_kernelbench_weights_match_by_seed_and_forbidden_ops_recorded(tmp_path):
    problem = get_problem(str(_kb_problem(tmp_path)))
    assert {"aten.mul", "aten._softmax"} <= problem.forbidden_ops
    # A ModelNew with differently named parameters still gets the same weights (same seed).
    kernel_file = _write(tmp_path, """
        import torch, torch.nn as nn
        class ModelNew(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.other_name = nn.Parameter(torch.randn(n))
            def forward(self, x):
                return torch.softmax(x * self.other_name, dim=-1)
    """, "kb_kernel.py")
    fn = problem.kernel_callable(_import(kernel_file, "kb_kernel_other"), {"default": 0}, torch.float32, "cpu")
    args = problem.make_inputs({"default": 0}, torch.float32, "cpu", 1)
    assert torch.allclose(fn(*args).double(), problem.reference(*[a.double() for a in args]), atol=1e-6)


def test_kernelbench_kernel_without_model_new_is_attribute_error(tmp_path):
    problem = get_problem(str(_kb_problem(tmp_path)))
    empty = _write(tmp_path, "x = 1\n", "empty_kernel.py")
    with pytest.raises(AttributeError, match="ModelNew"):
        problem.kernel_callable(_import(empty, "kb_empty"), {"default": 0}, torch.float32, "cpu")


def test_kernelbench_without_init_inputs_is_problem_error(tmp_path):
    path = _write(tmp_path, """
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return x
        def get_inputs():
            return []
    """, "kb_bad.py")
    with pytest.raises(ProblemError, match="get_init_inputs"):
        get_problem(str(path))


# ------------------------------------------------------------------------- CLI
def test_cli_problems_lists_kinds():
    from autokernel.cli import app

    result = CliRunner().invoke(app, ["problems"])
    assert result.exit_code == 0, result.output
    for needle in ("matmul", "attention", "fused_mlp", "kernel_fn(a[M,K], b[K,N])", "2048x2048x2048", "bf16"):
        assert needle in result.output


def test_cli_starter_prints_a_kernel_file():
    from autokernel.cli import app

    result = CliRunner().invoke(app, ["starter", "matmul"])
    assert result.exit_code == 0
    tree = ast.parse(result.stdout)
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "kernel_fn" in names and "KNOBS =" in result.stdout


def test_cli_starter_unknown_kind_exits_2():
    from autokernel.cli import app

    result = CliRunner().invoke(app, ["starter", "no_such_kind"])
    assert result.exit_code == 2
    assert "unknown problem kind" in result.output and "Traceback" not in result.output
