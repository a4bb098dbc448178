"""Issue 10, "the first hour": what a new user ran into, each reproduced.  Fast: a stand-in
evaluator for the loop, CliRunner for the commands, subprocesses only where the terminal
itself is the subject (a typo'd flag, the table widths)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autokernel.cli import app
from autokernel.harness.records import Comparison, Evaluation, ShapeTiming
from autokernel.loop.optimize import OptimizeSummary, ProblemSummary, Target, run_optimize
from autokernel.loop.results import ExperimentRecord, append_result, read_results

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")}
CLI = [sys.executable, "-m", "autokernel"]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class TimedEvaluator:
    """Judges without running: every kernel is correct, at a score read from the file
    (``# US=123``) or 100 us; interpreter timings, eager at 5 us (natively, far faster)."""

    seen: list["TimedEvaluator"] = []

    def __init__(self, spec, *, device, shapes=None, dtypes=None, timeout_s=60.0, weights=None, stop_at_loss=False):
        self.spec, self.timeout_s, self.timeouts_seen = spec, timeout_s, []
        TimedEvaluator.seen.append(self)

    def evaluate(self, kernel_file, incumbent_file=None):
        self.timeouts_seen.append(self.timeout_s)
        us = _us(Path(kernel_file).read_text())
        t = ShapeTiming(shape={"M": 4, "N": 8}, dtype="fp32", latency_us=us, spread_us=0.1, eager_us=5.0)
        ev = Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=True, verdict="pass",
                        timing_kind="interpreter", timings=[t], score_us=us, eager_score_us=5.0)
        if incumbent_file is not None:
            inc = _us(Path(incumbent_file).read_text())
            ev.vs_incumbent = Comparison(us, inc, 0.01, us < inc * 0.98, median_ratio=us / inc)
        return ev

    def close(self):
        pass


def _us(source: str) -> float:
    m = re.search(r"# US=([0-9.]+)", source)
    return float(m.group(1)) if m else 100.0


class Faster:
    """An agent whose every proposal is the current kernel made 2x faster."""

    name = "faster"

    def propose(self, context):
        from autokernel.agents.base import Proposal

        us = _us(context.best_source)
        return Proposal(source=re.sub(r"\n# US=.*", "", context.best_source) + f"\n# US={us / 2}\n",
                        description=f"to {us / 2} us")


def optimize(targets, work, **kw):
    kw.setdefault("budget_s", None)
    kw.setdefault("device", "cpu")
    kw.setdefault("show_progress", False)
    return run_optimize(targets, work, agent=kw.pop("agent", Faster()), _evaluator_factory=TimedEvaluator, **kw)


# ------------------------------------------------------------------ 1. install
def test_install_lines_and_triton_bound_match_the_readme():
    readme = (ROOT / "README.md").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"triton>=3.6,<3.10"' in pyproject and "triton 3.6–3.9" in readme
    assert '"torch>=2.11,<2.14"' in pyproject and "torch 2.11–2.13" in readme
    assert "torch==2.13.0+cpu" in readme and "CUDA build" in readme  # what plain pip gets, said plainly
    assert "--index-url" not in readme and "://download" not in readme


# ------------------------------------------------------------------ 2. one definition of the figures
def test_summary_results_and_report_agree_and_eager_is_a_dash_on_the_interpreter(tmp_path):
    from autokernel.report import collect

    work = tmp_path / "ws"
    summary = optimize([Target("reduce", "reduce")], work, max_experiments=2)
    rows = read_results(work / "results.tsv")
    start, best = rows[0].latency_us, rows[-1].latency_us
    assert [r.status for r in rows] == ["baseline", "keep", "keep"]
    for r in rows:  # vs start is start / this score, in every row
        assert r.speedup_vs_start == pytest.approx(start / r.latency_us, rel=1e-5)
        assert r.speedup_vs_eager is None  # interpreter vs native eager: meaningless (500x jumps)
    p = summary.problems[0]
    assert (p.start_score_us, p.best_score_us) == (start, best) and p.best_score_us <= p.start_score_us
    assert p.speedup_vs_start == pytest.approx(start / best) and p.speedup_vs_eager is None
    data = collect(work)  # a one-problem workspace has a report (item 3), with the same figures
    assert (data.problems[0].start_us, data.problems[0].best_us) == (start, best)
    assert data.problems[0].speedup_vs_start == pytest.approx(start / best)
    assert data.problems[0].speedup_vs_eager is None


def test_report_recomputes_vs_start_from_old_chained_rows(tmp_path):
    """A results.tsv written with chained figures (start 1787566, best 127994 read "21.94x")."""
    from autokernel.report import collect

    work = tmp_path / "ws"
    (work / "problems" / "rmsnorm").mkdir(parents=True)
    (work / "problems" / "rmsnorm" / "problem.json").write_text(json.dumps({"name": "rmsnorm", "kind": "rmsnorm"}))
    for rec in (ExperimentRecord(0, "rmsnorm", "tuner", "baseline", latency_us=1787566.0, speedup_vs_start=1.0),
                ExperimentRecord(7, "rmsnorm", "tuner", "keep", latency_us=127994.0, speedup_vs_start=21.94)):
        append_result(work / "results.tsv", rec)
    assert collect(work).problems[0].speedup_vs_start == pytest.approx(13.97, rel=1e-3)


# ------------------------------------------------------------------ 3. README examples
def test_bench_refuses_a_shape_too_large_for_the_interpreter(tmp_path):
    kernel = tmp_path / "my_rmsnorm.py"
    kernel.write_text(CliRunner().invoke(app, ["starter", "rmsnorm"]).output)
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["bench", str(kernel), "--problem", "rmsnorm", "--json", "--shape", "4096x4096",
                                   "--dtype", "bf16"])
    assert res.exit_code == 2, res.output
    assert "too large for the Triton interpreter" in res.output and "not correct" not in res.output
    assert "GPU" in res.output and "--timeout" in res.output
    assert time.monotonic() - t0 < 30  # refused up front, not after a timeout


def test_one_problem_workspace_gets_a_report_and_verify_says_what_it_needs(tmp_path):
    work = tmp_path / "ws"
    optimize([Target("softmax", "softmax")], work, max_experiments=1)
    res = CliRunner().invoke(app, ["report", str(work)])
    assert res.exit_code == 0, res.output
    md = (work / "report.md").read_text()
    assert "softmax" in md and "no model" in md
    assert (work / "progress.png").is_file() and not (work / "roofline.png").exists()
    res = CliRunner().invoke(app, ["verify", str(work)])
    assert res.exit_code == 2 and "no plan.json" not in res.output
    assert "needs a run made from" in res.output and "autokernel run" in res.output


# ------------------------------------------------------------------ 4. budgets
def test_first_evaluations_are_bounded_and_cheapest_first(tmp_path):
    from autokernel.loop import first_evals

    assert first_evals.timeout(60.0, 90.0, 5) == first_evals.MIN_TIMEOUT_S  # 18 s each, bounded per request
    assert first_evals.timeout(60.0, 600.0, 5) == pytest.approx(30.0)
    assert first_evals.timeout(60.0, None, 5) == 60.0 and first_evals.timeout(60.0, 3600.0, 1) == 60.0
    assert first_evals.order(["a", "b"], [9.0, 1.0], "cpu") == ["b", "a"]
    assert first_evals.order(["a", "b"], [9.0, 1.0], "cuda") == ["a", "b"]  # GPU: the Amdahl order

    TimedEvaluator.seen = []
    targets = [Target("softmax", "softmax", shapes=[{"M": 512, "N": 4096}]), Target("reduce", "reduce"),
               Target("rmsnorm", "rmsnorm")]
    summary = optimize(targets, tmp_path / "ws", budget_s=30.0, max_experiments=1)
    assert [e.spec for e in TimedEvaluator.seen][0] != "softmax"  # the big one goes last
    for e in TimedEvaluator.seen:
        assert e.timeouts_seen[0] < 60.0  # bounded by its share of the 30 s
        assert e.timeout_s == 60.0  # experiments get the usual timeout back
    assert all(p.start_score_us is not None for p in summary.problems)  # every problem started


# ------------------------------------------------------------------ 5. a user's own repository
def test_optimize_refuses_a_users_clean_checkout(tmp_path):
    repo = tmp_path / "mine"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "app.py").write_text("print('hi')\n")
    git(repo, "add", "app.py")
    git(repo, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "mine")
    before, branch = snapshot(repo), git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    res = CliRunner().invoke(app, ["optimize", "--problem", "reduce", "--workdir", str(repo), "--max-experiments", "0"])
    assert res.exit_code == 2 and "--use-existing-repo" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert snapshot(repo) == before and git(repo, "rev-parse", "--abbrev-ref", "HEAD") == branch


# ------------------------------------------------------------------ 7. unusable inputs
@pytest.mark.parametrize("args, words", [
    (["--problem", "reduce", "--kernel", "{nofn}"], "kernel_fn"),
    (["--problem", "reduce", "--shape", "0x64"], "at least 1"),
    (["--problem", str(ROOT / "examples" / "kernelbench_example.py"), "--shape", "128"], "get_inputs"),
    (["--problem", str(ROOT / "examples" / "custom_problem.py")], "no starter kernel"),
    (["--problem", "rmsnorm", "--shape", "4096x4096", "--device", "cpu"], "too large for the Triton interpreter"),
])
def test_unusable_inputs_exit_2_before_anything_is_written(tmp_path, args, words):
    nofn = tmp_path / "k.py"
    nofn.write_text("import triton\n\ndef kernel(x):\n    return x\n")
    work = tmp_path / "ws"
    res = CliRunner().invoke(app, ["optimize", *[a.replace("{nofn}", str(nofn)) for a in args],
                                   "--workdir", str(work)])
    assert res.exit_code == 2, res.output
    assert words in res.output and len(res.output.strip().splitlines()) == 1
    assert not work.exists()


def test_bench_refuses_a_shape_for_a_kernelbench_file():
    res = CliRunner().invoke(app, ["bench", str(ROOT / "examples" / "kernelbench_example_kernel.py"), "--problem",
                                   str(ROOT / "examples" / "kernelbench_example.py"), "--shape", "128"])
    assert res.exit_code == 2 and "get_inputs" in res.output


def test_verify_device_cuda_on_a_cpu_run_names_the_flag(tmp_path):
    import torch

    from autokernel.verify import device_error

    assert device_error("cuda", "cuda", "cpu") == \
        "--device cuda: no GPU is available here (the run was made on cpu); use --device cpu"
    assert "the run was made on cuda" in device_error("cuda", None, "cuda")
    if torch.cuda.is_available():
        return
    wd = tmp_path / "wd"
    (wd / "problems").mkdir(parents=True)
    (wd / "plan.json").write_text(json.dumps({"model": "llama", "device": "cpu", "time_kind": "cpu", "dtype": "fp32",
                                              "input_shape": [1, 8], "total_time_us": 1.0, "problems": []}))
    res = CliRunner().invoke(app, ["verify", str(wd), "--device", "cuda"])
    assert res.exit_code == 2 and "made on cpu" in res.output and "made on cuda" not in res.output


# ------------------------------------------------------------------ 8. where kernels were tuned
def test_tuned_on_is_recorded_and_apply_warns(tmp_path):
    import torch

    from autokernel.integrate import apply
    from autokernel.provenance import gpu_use_warning, tuned_on
    from autokernel.plan import Plan, PlanProblem, save_plan

    work = tmp_path / "ws"
    optimize([Target("rmsnorm", "rmsnorm")], work, max_experiments=1)
    assert tuned_on(work, "rmsnorm") == "interpreter"
    assert "rmsnorm" in gpu_use_warning(work, ["rmsnorm"]) and "interpreter" in gpu_use_warning(work, ["rmsnorm"])
    assert gpu_use_warning(work, []) is None
    save_plan(Plan(model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[1, 8], total_time_us=1.0,
                   problems=[PlanProblem("rmsnorm", "rmsnorm", "fp32", [{"M": 8, "N": 64}], [1], 1.0, 1.0)]),
              work / "plan.json")
    with pytest.warns(UserWarning, match="replaced nothing"):
        apply(torch.nn.Sequential(torch.nn.Linear(4, 4)), work)  # no RMSNorm in this model
    res = CliRunner().invoke(app, ["export", str(work), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0 and "tuned under the Triton interpreter" in res.output


# ------------------------------------------------------------------ 9. output
def _width(renderable) -> int:
    from rich.console import Console

    console = Console(width=300, record=True, file=open(os.devnull, "w"))
    console.print(renderable)
    return max(len(line.rstrip()) for line in console.export_text().splitlines())


def test_tables_fit_80_columns(tmp_path):
    from autokernel.report import collect, rich_table

    work = tmp_path / "ws"
    optimize([Target("cross_entropy", "cross_entropy"), Target("rmsnorm", "rmsnorm")], work, max_experiments=1)
    assert _width(rich_table(collect(work))) <= 80
    from autokernel.cli import optimize_cmd

    summary = OptimizeSummary(problems=[ProblemSummary("cross_entropy_12", "cross_entropy", 1234, 56, 1787566.0,
                                                       127994.0, 13.97, None, 99.9, work / "k.py"),
                                        ProblemSummary("rmsnorm", "rmsnorm", 3, 0, 50.0, 50.0, 1.0, 1.0, 10.0,
                                                       work / "r.py")],
                              stopped_reason="budget", workdir=work, branch="autokernel/x", run_name="x")
    from rich.console import Console

    console = Console(width=300, record=True, file=open(os.devnull, "w"))
    import unittest.mock as mock

    with mock.patch("rich.console.Console", lambda **kw: console):
        optimize_cmd.print_summary(summary)
    text = console.export_text()
    table_lines = [ln for ln in text.splitlines()
                   if ("cross_entropy_12" in ln or "start us" in ln) and not ln.startswith("best kernels")]
    assert table_lines and max(len(ln.rstrip()) for ln in table_lines) <= 80
    # speedups as report.md writes them (a new user's trial: "1x" here, "1.00x" in the report)
    assert "1.00x" in text and " 1x" not in text and "13.97x" in text
    # the kernel's path, not a placeholder (a new user's trial: "problems/<problem>/kernel.py")
    assert f"best kernels: {work}/problems/{{cross_entropy_12,rmsnorm}}/kernel.py" in text
    out = subprocess.run([*CLI, "problems"], env={**ENV, "COLUMNS": "80"}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and max(len(ln) for ln in out.stdout.splitlines()) <= 80


def test_a_typod_flag_is_one_line():
    out = subprocess.run([*CLI, "optimize", "--budgte", "1m"], env=ENV, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "--budgte" in out.stderr
    assert "╭" not in out.stderr + out.stdout


def test_progress_chart_is_not_stretched_by_a_reverted_outlier():
    from autokernel.report import progress_y_limits

    lo, hi = progress_y_limits(kept=[1.2, 1.5], every=[1.0, 1.2, 0.9, 1.5, 0.002, 40.0])
    assert 0.5 < lo < 1.0 and 1.5 < hi < 3.0


def test_profiler_noise_is_dropped_and_profile_defaults_like_run():
    from autokernel.cli.profile_cmd import default_dtype
    from autokernel.quiet import keep_line

    assert not keep_line("USDT:2026-12-01 02:19:15 12081:12081 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
    assert keep_line("RuntimeError: something real\n")
    assert default_dtype("cpu") == "fp32" and default_dtype("cuda") == "bf16"


def test_exported_package_builds_without_setuptools_warnings(tmp_path):
    from autokernel.plan import Plan, PlanProblem, save_plan

    work = tmp_path / "ws"
    optimize([Target("rmsnorm", "rmsnorm")], work, max_experiments=0)
    save_plan(Plan(model="llama", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[1, 8], total_time_us=1.0,
                   problems=[PlanProblem("rmsnorm", "rmsnorm", "fp32", [{"M": 8, "N": 64}], [1], 1.0, 1.0)]),
              work / "plan.json")
    res = CliRunner().invoke(app, ["export", str(work), "--format", "package", "--out", str(tmp_path / "pkg")])
    assert res.exit_code == 0, res.output
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                          str(tmp_path / "whl"), str(tmp_path / "pkg")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "warning" not in (out.stdout + out.stderr).lower()
    import zipfile

    names = zipfile.ZipFile(next((tmp_path / "whl").glob("*.whl"))).namelist()
    assert "autokernel_llama_kernels/data/problems/rmsnorm/kernel.py" in names
    assert "autokernel_llama_kernels/data/problems/rmsnorm/problem.json" in names


def test_interpreter_overflow_warnings_are_silenced_here_and_in_workers(monkeypatch):
    import warnings

    from autokernel.quiet import INTERPRETER_WARNING, silence_interpreter_warnings

    monkeypatch.setenv("PYTHONWARNINGS", "default::DeprecationWarning")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        silence_interpreter_warnings()
        warnings.warn("overflow encountered in cast", RuntimeWarning)
        warnings.warn("invalid value encountered in subtract", RuntimeWarning)  # new-user trial: softmax's optimize
        warnings.warn("something else", RuntimeWarning)
    assert [str(w.message) for w in caught] == ["something else"]
    assert os.environ["PYTHONWARNINGS"] == f"default::DeprecationWarning,{INTERPRETER_WARNING}"
    child = subprocess.run([sys.executable, "-c", "import warnings; warnings.warn('overflow encountered in "
                            "multiply', RuntimeWarning); warnings.warn('invalid value encountered in subtract', "
                            "RuntimeWarning)"], capture_output=True, text=True, timeout=60)
    assert "overflow" not in child.stderr and "invalid value" not in child.stderr
