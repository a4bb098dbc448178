"""User problem files and the `problems` / `starter` commands."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from autokernel.problems import ProblemError, get_problem
from autokernel.problems.custom import load_problem_file

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


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
    # a size under 1 is refused in every form a shape takes, as on the command line
    (MINIMAL.replace('{"N": 1024}', '{"N": 0}'), "every size must be at least 1"),
    (MINIMAL.replace('{"N": 1024}', '[-4]'), "every size must be at least 1"),
    (MINIMAL + "\nDTYPES = ['int3']\n", "unknown dtype"),
    (MINIMAL + "\nTOLERANCES = {'fp16': (1, 2)}\n", "bad TOLERANCES"),
    (MINIMAL + "\nFIXED_DIMS = ('Q',)\n", "FIXED_DIMS"),
    (MINIMAL.replace("def reference(x):", "reference = 3\ndef _unused(x):"), "reference must be a function"),
    # unseeded draws: the worker's draw of a timed call and the judge's re-draw would differ
    (MINIMAL.replace("g.manual_seed(seed)", "g.seed()"), "different values for the same seed"),
])
def test_malformed_files_raise_one_line_problem_error(tmp_path, text, fragment):
    path = _write(tmp_path, text)
    with pytest.raises(ProblemError) as info:
        get_problem(str(path))
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_flag_dimensions_take_0_in_every_form(tmp_path):
    """``causal`` is a 0/1 setting (problems.base.FLAG_DIMS): a string shape took only sizes >= 1,
    where a mapping took 0."""
    text = MINIMAL.replace('DIMS = ["N"]', 'DIMS = ["N", "causal"]').replace(
        'SHAPES = [{"N": 1024}, "N=4096"]', 'SHAPES = [{"N": 1024, "causal": 0}, "N=4096,causal=0", "8x1", [16, 0]]')
    problem = load_problem_file(_write(tmp_path, text, "flagged.py"))
    assert [s["causal"] for s in problem.gpu_shapes] == [0, 0, 1, 0]
    with pytest.raises(ProblemError, match="causal is 0 or 1"):
        load_problem_file(_write(tmp_path, text.replace('"8x1"', '"8x2"'), "flagged2.py"))


def test_missing_file_is_problem_error(tmp_path):
    with pytest.raises(ProblemError, match="not found"):
        get_problem(str(tmp_path / "nope.py"))


def test_a_kernel_file_or_a_folder_given_as_the_problem_says_what_it_is(tmp_path):
    """New-user trial: `bench PROBLEM --problem SOLUTION` (the two swapped) said the solution
    'lacks DIMS, SHAPES, reference, make_inputs'; `--problem level1/` said 'problem file not
    found' of a folder that is there."""
    solution = _write(tmp_path, "import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n", "sol.py")
    with pytest.raises(ProblemError, match="defines ModelNew: it is a kernel file") as info:
        get_problem(str(solution))
    assert "--problem" in str(info.value)
    kernel = _write(tmp_path, "def kernel_fn(x):\n    return x\n", "k.py")
    with pytest.raises(ProblemError, match="defines kernel_fn: it is a kernel file"):
        get_problem(str(kernel))
    with pytest.raises(ProblemError, match="is a directory") as info:
        get_problem(str(tmp_path))
    assert "arena" in str(info.value)


# ------------------------------------------------------------------ KernelBench
# KernelBench files have their own tests: tests/test_kernelbench.py


# ------------------------------------------------------------------------- CLI
def test_cli_problems_lists_kinds():
    from autokernel.cli import app

    result = CliRunner().invoke(app, ["problems"])
    assert result.exit_code == 0, result.output
    for needle in ("matmul", "attention", "fused_mlp", "kernel_fn(a[M,K], b[K,N])", "2048x2048x2048", "bf16"):
        assert needle in result.output


def test_cli_problems_describes_the_kinds_asked_for():
    from autokernel.cli import app

    result = CliRunner().invoke(app, ["problems", "moe_experts"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "moe_experts (bf16, fp16)" in text and "matmul" not in text
    assert "CPU shapes: 16x2x4x32x48" in text and "fp32 with --dtype" in text
    result = CliRunner().invoke(app, ["problems", "moe"])
    assert result.exit_code == 2 and "unknown problem kind 'moe'" in result.output


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


def test_cli_starter_of_a_problem_file_says_none_is_shipped_and_what_to_write():
    """New-user trial: `starter level1/19_ReLU.py` said 'unknown problem kind' and listed the
    30 kinds; `problems FILE` already said what a file is."""
    from autokernel.cli import app

    path = ROOT / "examples" / "kernelbench_example.py"
    result = CliRunner().invoke(app, ["starter", str(path)])
    assert result.exit_code == 2 and "unknown problem kind" not in result.output, result.output
    assert "ModelNew" in result.output and "kernelbench_example_kernel.py" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
