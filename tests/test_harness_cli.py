"""`autokernel bench` and `autokernel calibrate`: exit codes, one JSON object, one-line errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autokernel.cli import app
from autokernel.problems.registry import KERNELS_DIR

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

BAD = Path(__file__).parent / "kernels"
STARTER = str(KERNELS_DIR / "reduce.py")


def run(*args):
    return CliRunner().invoke(app, list(args))


def test_correct_kernel_json_exit_0_and_against_times_two_files_interleaved():
    r = run("bench", STARTER, "--problem", "reduce", "--device", "cpu", "--shape", "8x64", "--shape", "3x50",
            "--dtype", "fp32,fp16", "--json", "--no-baselines", "--against", STARTER)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["verdict"] == "pass" and d["correct"] is True and d["timing_kind"] == "interpreter"
    assert [t["shape"] for t in d["timings"]] == [{"M": 8, "N": 64}, {"M": 3, "N": 50}]
    assert all(t["dtype"] == "fp32" for t in d["timings"])
    c = d["vs_incumbent"]
    assert c["candidate_us"] > 0 and c["incumbent_us"] > 0 and c["noise_frac"] >= 0


def test_wrong_kernel_is_exit_1_with_a_verdict():
    r = run("bench", str(BAD / "reduce_partial_write.py"), "--problem", "reduce", "--device", "cpu", "--json")
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    assert d["verdict"] == "rejected" and d["integrity"][0]["rule"] == "partial-write"


def test_against_says_so_in_the_human_output():
    # the --json record of an --against run: test_correct_kernel_json_exit_0_and_against_...
    r = run("bench", STARTER, "--problem", "reduce", "--device", "cpu", "--shape", "8x64", "--no-baselines",
            "--against", STARTER, "--dtype", "fp32")
    assert r.exit_code == 0 and "against the other file (interleaved)" in r.stdout


def test_human_output_names_the_verdict():
    r = run("bench", str(BAD / "no_kernel_fn.py"), "--problem", "reduce", "--device", "cpu")
    assert r.exit_code == 1 and "incorrect" in r.stdout and "kernel_fn" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["bench", STARTER, "--problem", "no_such_kind"], "unknown problem"),
    (["bench", str(BAD / "missing.py"), "--problem", "reduce"], "not found"),
    (["bench", STARTER, "--problem", "reduce", "--shape", "12xx3"], "malformed shape"),
    (["bench", STARTER, "--problem", "reduce", "--shape", "1x2x3"], "expected 2"),
    # shapes whose dimensions contradict each other: a usage error, not a silently clamped routing
    # (moe_experts drew min(K, E) experts a token) or a traceback from the reference (attention)
    (["bench", STARTER, "--problem", "moe_experts", "--shape", "16x5x4x32x48"], "K=5 experts a token"),
    (["bench", STARTER, "--problem", "attention", "--shape", "1x4x3x16x32x1"], "H=4 is not a multiple of Hkv=3"),
    (["bench", STARTER, "--problem", "attention_rotary", "--shape", "1x4x3x16x32x1"], "not a multiple of Hkv"),
    (["bench", STARTER, "--problem", "attention_masked", "--shape", "1x4x3x16x32x1x0"], "not a multiple of Hkv"),
    (["bench", STARTER, "--problem", "attention", "--shape", "1x4x2x16x32x2"], "causal is 0 or 1"),
    (["bench", STARTER, "--problem", "reduce", "--dtype", "fp8"], "unknown dtype"),
    (["bench", STARTER, "--problem", "reduce", "--device", "cuda"], "no CUDA GPU"),
    (["bench", STARTER], "--problem"),
    (["calibrate"], "CUDA GPU"),
    (["bench", STARTER, "--problem", "reduce", "--against", str(BAD / "missing.py")], "--against file not found"),
    # an --against file that can never run was judged after the candidate's whole evaluation, exit 0
    (["bench", STARTER, "--problem", "reduce", "--against", str(BAD / "bad_syntax.py")], "--against: kernel file"),
    (["bench", STARTER, "--problem", "reduce", "--against", str(BAD / "no_kernel_fn.py")], "defines no kernel_fn"),
    # a new user's trial (2026-12-06): a directory was "not found", a problem file "an unknown kind"
    (["bench", str(BAD), "--problem", "reduce"], "is a directory"),
    (["problems", str(Path(__file__).parent / "attacks_coverage" / "argmax_problem.py")], "autokernel bench KERNEL --problem"),
])
def test_usage_errors_exit_2_with_one_line(args, needle):
    r = run(*args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autokernel: error:") and needle in lines[0]
    assert "Traceback" not in r.output and r.stdout == ""


def test_every_shape_the_problems_list_shows_is_a_valid_shape_argument():
    """`autokernel problems` prints the shapes as --shape takes them; flags (causal, tanh,
    additive, per_query) are 0 or 1, and 0 is a setting, not a zero size."""
    from autokernel.problems import format_shape, get_problem
    from autokernel.problems.registry import list_kinds

    for kind in list_kinds():
        p = get_problem(kind)
        for shape in p.gpu_shapes + p.cpu_shapes + p.gpu_edge_shapes + p.cpu_edge_shapes:
            assert p.parse_shape(format_shape(shape)) == shape, (kind, shape)
    attention = get_problem("attention")
    assert attention.parse_shape("B=1,H=4,Hkv=2,S=16,D=32,causal=0")["causal"] == 0
    with pytest.raises(ValueError, match="every size must be at least 1, got S=0"):
        attention.parse_shape("1x4x2x0x32x1")


def test_unparsable_file_real_process_prints_exactly_one_json_object():
    r = subprocess.run([sys.executable, "-m", "autokernel", "bench", str(BAD / "bad_syntax.py"), "--problem", "reduce",
                        "--device", "cpu", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)  # the whole stdout is one object
    assert d["verdict"] == "incorrect" and d["failed_stage"] == "load" and "SyntaxError" in d["message"]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("value,needle", [("three", "whole number"), ("-1", "0 or more")])
def test_a_malformed_compile_ahead_setting_is_a_usage_error_not_silently_none(monkeypatch, value, needle):
    monkeypatch.setenv("AUTOKERNEL_COMPILE_AHEAD", value)
    r = run("bench", STARTER, "--problem", "reduce", "--device", "cpu", "--shape", "8x64", "--no-baselines")
    assert r.exit_code == 2, r.output
    assert "AUTOKERNEL_COMPILE_AHEAD" in r.stderr and needle in r.stderr and "Traceback" not in r.output


def test_interpreter_timings_give_no_speed_ratio():
    """Interpreter times over PyTorch's CPU times printed "0.00x eager", a ratio that means nothing
    (the run's report already said so)."""
    r = run("bench", STARTER, "--problem", "reduce", "--device", "cpu", "--shape", "8x64", "--dtype", "fp32")
    assert r.exit_code == 0, r.output
    score = next(line for line in r.output.splitlines() if line.startswith("score "))
    assert "eager" not in score and "torch.compile" not in score
    row = next(line for line in r.output.splitlines() if line.lstrip("│ ").startswith("8x64"))
    assert [c.strip() for c in row.strip(" │").split("│")][-2:] == ["-", "-"], row  # x eager, x compile


def test_a_worker_whose_parent_is_gone_ends_without_a_traceback():
    """Ctrl-C in `autokernel run` sometimes left a worker's BrokenPipeError traceback under the
    'interrupted; run the same command again' line: the worker wrote to a parent that had gone."""
    import subprocess
    import sys

    script = ("import multiprocessing as mp\n"
              "from autokernel.harness.worker_main import main\n"
              "parent, child = mp.Pipe()\n"
              "parent.close()\n"
              "main(child, 'cpu')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("command, flag", [("run", "--no-compile"), ("verify", "--no-timing"), ("optimize", "--quiet")])
def test_help_shows_boolean_flags_as_plain_flags(command, flag):
    """A new user's `autokernel run --help` listed every flag as `--no-compile <bool>` (typer's rich
    help gives a flag its type): a flag takes no value, and its help says nothing of one."""
    result = CliRunner().invoke(app, [command, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    assert flag in result.output
    assert "<bool>" not in result.output, result.output
