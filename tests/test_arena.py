"""The arena (autokernel arena): fast_p arithmetic, the table, and whole runs on the CPU over a
few level-1 and level-2 KernelBench problems with solutions of our own
(tests/kernelbench_solutions/), sizes shrunk with --scale."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autokernel.arena import report, scoring
from autokernel.arena.records import ProblemResult
from autokernel.cli import app

ROOT = Path(__file__).resolve().parent.parent
KERNELBENCH = Path(os.environ.get("KERNELBENCH_DIR") or ROOT.parent / "shared" / "kernelbench")
SOLUTIONS = ROOT / "tests" / "kernelbench_solutions"
needs_kernelbench = pytest.mark.skipif(not (KERNELBENCH / "level1").is_dir(),
                                       reason=f"the KernelBench problem files are not at {KERNELBENCH}")
PROBLEMS = ("level1/19_ReLU.py", "level1/23_Softmax.py", "level2/12_Gemm_Multiply_LeakyReLU.py")


def _result(name: str, verdict: str = "pass", speedup: float | None = None, heldout: str | None = "pass",
            status: str = "judged") -> ProblemResult:
    return ProblemResult(name, f"{name}.py", f"sol/{name}.py", status, verdict=verdict, speedup_vs_eager=speedup,
                         heldout=heldout)


# ------------------------------------------------------------------ arithmetic
def test_fast_p_counts_correct_and_faster_than_p():
    correct = [True, True, True, False, True]
    speedups = [0.8, 1.2, 2.5, 9.0, None]
    assert scoring.fast_p(correct, speedups, 0.0) == 4 / 5
    assert scoring.fast_p(correct, speedups, 1.0) == 2 / 5  # 9x but incorrect does not count
    assert scoring.fast_p(correct, speedups, 1.5) == 1 / 5
    assert scoring.fast_p(correct, speedups, 2.0) == 1 / 5
    assert scoring.fast_p(correct, [None] * 5, 1.0) is None  # nothing timed (CPU): no number
    assert scoring.fast_p([], [], 1.0) is None


def test_summary_is_conditional_on_heldout_and_leaves_skipped_out():
    results = [_result("a", speedup=2.0), _result("b", speedup=1.6, heldout="fail"),
               _result("c", verdict="incorrect", heldout=None), _result("d", speedup=0.5, heldout="n/a"),
               _result("e", status="skipped", verdict="", heldout=None)]
    summary = scoring.summary(results)
    assert summary["problems"] == 4 and summary["skipped"] == 1
    assert summary["file_sizes"] == {"correct": 0.75, "fast_0": 0.75, "fast_1": 0.5, "fast_1.5": 0.5, "fast_2": 0.0}
    assert summary["heldout"] == {"correct": 0.5, "fast_0": 0.5, "fast_1": 0.25, "fast_1.5": 0.25, "fast_2": 0.0}


def test_table_fits_80_columns_and_shows_dashes_for_untimed():
    long = _result("75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_strided__grouped", heldout=None)
    rows = [long, _result("19_ReLU", speedup=1.234), _result("x", status="skipped", verdict="", heldout=None)]
    rows[2].message = "cannot scale x.py by 0.01 " + "(very long reason) " * 10
    text = report.table(rows, scoring.summary(rows))
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "1.23" in text and " - " in text and "skipped x:" in text


# ------------------------------------------------------------------ whole runs
def _arena(args: list[str]):
    return CliRunner().invoke(app, ["arena", *args])


def _solutions(tmp_path: Path, name: str, files: list[str]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for f in files:
        shutil.copy(SOLUTIONS / f, folder / Path(f).name)
    return folder


@needs_kernelbench
def test_arena_counts_honest_triton_and_catches_hard_coded_sizes(tmp_path):
    sols = _solutions(tmp_path, "honest", ["level1/19_ReLU.py", "level2/12_Gemm_Multiply_LeakyReLU.py",
                                           "hardcoded/23_Softmax.py"])
    out = tmp_path / "out"
    args = [*(str(KERNELBENCH / p) for p in PROBLEMS), "--solutions", str(sols), "--out", str(out),
            "--scale", "0.005", "--device", "cpu", "--json"]
    result = _arena(args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    by_name = {p["problem"]: p for p in data["problems"]}
    assert by_name["19_ReLU"]["verdict"] == "pass" and by_name["19_ReLU"]["heldout"] == "pass"
    assert by_name["12_Gemm_Multiply_LeakyReLU"]["verdict"] == "pass"
    assert by_name["12_Gemm_Multiply_LeakyReLU"]["heldout"] == "pass"
    softmax = by_name["23_Softmax"]
    assert softmax["verdict"] == "pass" and softmax["heldout"] == "fail", softmax
    assert "batch_size 4096->20, dim 393216->1966" in softmax["sizes"]
    assert softmax["speedup_vs_eager"] is None and "CPU" in softmax["timing_note"]
    fast = data["fast_p"]
    assert fast["file_sizes"]["correct"] == 1.0 and fast["heldout"]["correct"] == pytest.approx(2 / 3)
    assert fast["file_sizes"]["fast_1"] is None  # nothing timed on the CPU
    assert (out / "report.md").is_file() and len(list((out / "results").glob("*.json"))) == 3
    # resumable: a second run reuses every stored result (no judging), the table is the same
    again = _arena(args[:-1])
    assert again.exit_code == 0, again.output
    assert again.stderr.count("done before") == 3
    table = again.stdout.split("results in")[0]
    assert "23_Softmax" in table and all(len(line) <= 80 for line in table.splitlines())
    # a solution changed since it was judged is judged again (a new user's trial: the stored pass
    # of the honest ReLU stood after a copy of the reference replaced it)
    shutil.copy(SOLUTIONS / "cheats/19_ReLU.py", sols / "19_ReLU.py")
    changed = _arena(args)
    assert changed.stderr.count("done before") == 2 and changed.stderr.count("judging again") == 1, changed.stderr
    assert {p["problem"]: p for p in json.loads(changed.stdout)["problems"]}["19_ReLU"]["verdict"] != "pass"


@needs_kernelbench
def test_arena_refuses_reference_copies_torch_rewrites_and_wrong_kernels(tmp_path):
    cheats = _solutions(tmp_path, "cheats", ["cheats/19_ReLU.py", "cheats/23_Softmax.py"])
    result = _arena([str(KERNELBENCH / p) for p in PROBLEMS] + ["--solutions", str(cheats), "--out",
                    str(tmp_path / "o1"), "--scale", "0.005", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    by_name = {p["problem"]: p for p in json.loads(result.stdout)["problems"]}
    for name in ("19_ReLU", "23_Softmax"):
        assert by_name[name]["verdict"] == "rejected" and "torch-op" in by_name[name]["message"]
    assert by_name["12_Gemm_Multiply_LeakyReLU"]["status"] == "no-solution"
    wrong = _solutions(tmp_path, "wrong", ["wrong/19_ReLU.py"])
    result = _arena([str(KERNELBENCH / PROBLEMS[0]), "--solutions", str(wrong), "--out", str(tmp_path / "o2"),
                     "--scale", "0.005", "--device", "cpu", "--json"])
    (relu,) = json.loads(result.stdout)["problems"]
    assert relu["verdict"] == "incorrect" and relu["failed_stage"] == "numerics" and "signed" in relu["message"]


@needs_kernelbench
def test_arena_refuses_numpy(tmp_path):
    cheats = _solutions(tmp_path, "numpy", ["cheats/12_Gemm_Multiply_LeakyReLU.py"])
    result = _arena([str(KERNELBENCH / PROBLEMS[2]), "--solutions", str(cheats), "--out", str(tmp_path / "o"),
                     "--scale", "0.005", "--device", "cpu", "--json"])
    (gemm,) = json.loads(result.stdout)["problems"]
    assert gemm["verdict"] != "pass", gemm


@needs_kernelbench
def test_arena_optimize_starts_from_no_kernel(tmp_path):
    """--optimize: the agent (here a command that writes an honest solution) writes the first
    kernel into the problem's own workspace; the table judges the best kernel kept."""
    solution = SOLUTIONS / "level1" / "19_ReLU.py"
    result = _arena([str(KERNELBENCH / PROBLEMS[0]), "--optimize", "--agent", "command", "--agent-cmd",
                     f"cp {solution} kernel.py", "--budget-per-problem", "5m", "--max-experiments", "1",
                     "--out", str(tmp_path / "o"), "--scale", "0.005", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    (relu,) = json.loads(result.stdout)["problems"]
    assert relu["verdict"] == "pass" and relu["heldout"] == "pass", relu
    # the workspace names the problem after its file (it was `kernel`, so export wrote kernel.py)
    assert relu["solution_file"].endswith("problems/19_ReLU/kernel.py") and "1 experiment" in relu["extra"]["optimize"]


def test_arena_usage_errors_exit_2(tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "1_x.py").write_text("x = 1\n")
    for args, needle in ((["nope_dir"], "exactly one of"),
                         ([str(tmp_path), "--solutions", str(tmp_path)], "no problem files"),
                         ([str(tmp_path), "--solutions", str(tmp_path), "--scale", "2"], "--scale"),
                         ([str(problems), "--optimize"], "--budget-per-problem"),
                         # an --out that cannot be made was a FileNotFoundError traceback, exit 1
                         ([str(problems), "--solutions", str(tmp_path), "--out", str(problems / "1_x.py" / "o")],
                          "cannot write")):
        result = _arena(args)
        assert result.exit_code == 2 and needle in result.stderr and "Traceback" not in result.output, result.output
    assert not (Path.cwd() / "arena-out").exists()


def test_arena_optimize_refuses_a_misconfigured_agent_before_any_problem(tmp_path, monkeypatch):
    """--agent llm without --llm (or without a key), --agent command without --agent-cmd, the
    tuner (nothing to tune): one line and exit 2 before the first problem is optimized, as
    `optimize` and `run` do (it was a traceback after '[1/1] ...: optimizing')."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "1_x.py").write_text("x = 1\n")
    out = tmp_path / "o"
    for extra, needle in ((["--agent", "llm"], "--llm openai:MODEL"),
                          (["--agent", "llm", "--llm", "openai:m"], "OPENAI_API_KEY"),
                          (["--agent", "command"], "--agent-cmd"),
                          # the tuner only turns a kernel's knobs and --optimize starts from none: every
                          # problem came out 'no-solution: no solution file' after 0 experiments, exit 0
                          (["--agent", "tuner"], "the tuner turns the knobs of a kernel")):
        result = _arena([str(problems), "--optimize", "--budget-per-problem", "1m", "--out", str(out), *extra])
        assert result.exit_code == 2 and needle in result.stderr, result.output
        assert "Traceback" not in result.output and "optimizing" not in result.output, result.output
    assert not out.exists()


def _stopped_optimize(monkeypatch, reason: str, message: str):
    """--optimize with the loop faked: it stops at once with ``reason``."""
    import types

    import autokernel.arena.run as arena_run
    import autokernel.loop.optimize as loop_optimize

    problem = types.SimpleNamespace(shapes_for=lambda device: [{"n": 8}])
    monkeypatch.setattr(arena_run, "load", lambda *a, **k: (problem, None))
    monkeypatch.setattr(arena_run, "judge", lambda *a, **k: pytest.fail("judged after the loop stopped"))
    monkeypatch.setattr(loop_optimize, "run_optimize", lambda targets, workdir, **k: types.SimpleNamespace(
        stopped_reason=reason, message=message, problems=[], workdir=workdir, experiments_run=0))


def test_arena_optimize_resumes_a_workspace_that_called_its_problem_kernel(tmp_path, monkeypatch):
    """Workspaces made before 2026-12-07 named every problem `kernel`: a later run resumes them
    under that name; a new workspace names the problem after its file."""
    names = []
    _stopped_optimize(monkeypatch, "interrupted", "interrupted")
    import autokernel.loop.optimize as loop_optimize

    faked = loop_optimize.run_optimize
    monkeypatch.setattr(loop_optimize, "run_optimize",
                        lambda targets, workdir, **k: names.append(targets[0].name) or faked(targets, workdir, **k))
    problem = tmp_path / "7_Conv+ReLU.py"
    problem.write_text("x = 1\n")
    out = tmp_path / "o"
    args = [str(problem), "--optimize", "--agent", "command", "--agent-cmd", "true", "--budget-per-problem", "1m",
            "--out", str(out), "--device", "cpu"]
    assert _arena(args).exit_code == 130
    (out / "workspaces" / problem.stem / "problems" / "kernel").mkdir(parents=True)
    assert _arena(args).exit_code == 130
    assert names == ["7_Conv-ReLU", "kernel"]


def test_arena_optimize_stopped_by_ctrl_c_or_a_refused_agent_stores_nothing(tmp_path, monkeypatch):
    """Ctrl-C inside a problem's optimize loop, or an agent refused for good (a command the
    shell cannot run): the arena stops there (exit 130 / exit 2 with the agent's reason) and
    stores no result for that problem, so the next run optimizes it again.  Before, the
    problem was stored as no-solution (reused on every later run, even with the agent fixed)
    and the arena went on to the next problem as if nothing had happened."""
    problem = tmp_path / "1_x.py"
    problem.write_text("x = 1\n")
    out = tmp_path / "o"
    args = [str(problem), "--optimize", "--agent", "command", "--agent-cmd", "true", "--budget-per-problem", "1m",
            "--out", str(out), "--device", "cpu"]
    _stopped_optimize(monkeypatch, "interrupted", "interrupted; run the same command again to resume")
    result = _arena(args)
    assert result.exit_code == 130 and "run the same command again" in result.stderr, result.output
    assert not (out / "results").exists() or not list((out / "results").iterdir())
    _stopped_optimize(monkeypatch, "agent-refused", "--agent-cmd could not run (exited with status 127)")
    result = _arena(args)
    assert result.exit_code == 2 and "--agent-cmd could not run" in result.stderr, result.output
    assert "Traceback" not in result.output
    assert not (out / "results").exists() or not list((out / "results").iterdir())


def _optimized_example_row(monkeypatch, tmp_path, reason: str, message, experiments: int) -> dict:
    """``arena --optimize --json`` on the example problem with the loop faked: it stops at once
    with ``reason`` and ``message(problem name)`` after ``experiments``; the problem's row."""
    import types

    import autokernel.loop.optimize as loop_optimize

    monkeypatch.setattr(loop_optimize, "run_optimize", lambda targets, workdir, **k: types.SimpleNamespace(
        stopped_reason=reason, message=message(targets[0].name), problems=[], workdir=workdir,
        experiments_run=experiments))
    result = _arena([str(ROOT / "examples" / "kernelbench_example.py"), "--optimize", "--agent", "command",
                     "--agent-cmd", "true", "--budget-per-problem", "1m", "--out", str(tmp_path / "o"), "--device",
                     "cpu", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["problems"]
    return row


def test_arena_optimize_that_kept_nothing_says_so_not_no_solution_file(tmp_path, monkeypatch):
    """A problem whose optimize loop kept no correct kernel was reported 'no solution file'
    (the message for a --solutions directory without its file); the loop's own account goes in."""
    row = _optimized_example_row(monkeypatch, tmp_path, "budget", lambda name: "", 3)
    assert row["status"] == "no-solution" and "no solution file" not in row["message"], row
    assert "no correct kernel kept" in row["message"] and "3 experiment(s)" in row["message"], row


def test_the_progress_line_says_the_seconds_were_the_judging_and_the_optimizing_apart(tmp_path, monkeypatch):
    """New-user trial: after a minute of optimizing, the line said "pass, held-out pass (7.2 s)":
    the judging alone, unnamed; a problem never judged said "(0.0 s)"."""
    import time
    import types

    import autokernel.loop.optimize as loop_optimize
    from autokernel.arena.run import time_clause

    def slow(targets, workdir, **k):
        time.sleep(0.3)
        return types.SimpleNamespace(stopped_reason="budget", message="", problems=[], workdir=workdir,
                                     experiments_run=1)

    monkeypatch.setattr(loop_optimize, "run_optimize", slow)
    result = _arena([str(ROOT / "examples" / "kernelbench_example.py"), "--optimize", "--agent", "command",
                     "--agent-cmd", "true", "--budget-per-problem", "1m", "--out", str(tmp_path / "o"), "--device",
                     "cpu"])
    assert result.exit_code == 0, result.output
    import re

    said = re.search(r"no correct kernel kept \(optimized in (\d+\.\d) s\)\n", result.stderr)
    assert said and float(said.group(1)) >= 0.3, result.stderr  # loading the problem, then the loop
    judged = _result("a")
    judged.wall_s = 5.25
    assert time_clause(judged, None) == "judged in 5.2 s"
    assert time_clause(judged, 61.0) == "optimized in 61.0 s, judged in 5.2 s"


def test_report_and_sorted_plot_sit_next_to_the_json(tmp_path):
    rows = [_result("a", speedup=0.7), _result("b", speedup=2.4), _result("c", verdict="incorrect", heldout=None)]
    paths = report.write(tmp_path, rows, scoring.summary(rows), "a title")
    assert paths["plot"].stat().st_size > 0
    data = json.loads(paths["json"].read_text())
    assert [p["problem"] for p in data["problems"]] == ["a", "b", "c"] and data["fast_p"]["file_sizes"]["fast_2"] == 1 / 3
    text = paths["report"].read_text()
    assert "# a title" in text and "| b | pass |" in text and "speedup.png" in text
    assert not report.plot([_result("d")], tmp_path / "none.png")  # nothing timed: no plot


@needs_kernelbench
def test_a_file_too_large_for_the_interpreter_is_refused_before_any_input_is_made(tmp_path):
    """A new user's trial: at its own sizes (4096 x 393216 floats) 19_ReLU's inputs alone took the
    24 GB machine's memory, and both ``bench`` and ``arena`` were killed with no message."""
    problem = KERNELBENCH / "level1" / "19_ReLU.py"
    solution = SOLUTIONS / "level1" / "19_ReLU.py"
    bench = CliRunner().invoke(app, ["bench", str(solution), "--problem", str(problem), "--device", "cpu"])
    assert bench.exit_code == 2, bench.output
    assert "too large for the Triton interpreter" in bench.output and "--scale 0.01" in bench.output
    # optimize too (a new user's second try, 2026-12-06: killed for memory after 100 s, no word)
    workdir = tmp_path / "ws"
    optimize = CliRunner().invoke(app, ["optimize", "--problem", str(problem), "--kernel", str(solution),
                                        "--workdir", str(workdir), "--budget", "1m", "--device", "cpu"])
    assert optimize.exit_code == 2, optimize.output
    assert "too large for the Triton interpreter" in optimize.output and "--scale 0.01" in optimize.output
    # the remedy is the arena's optimize loop, not judging kernels one has (new-user trial, 2026-12-07)
    assert "--optimize" in optimize.output and "--solutions" not in optimize.output
    assert "--solutions DIR" in bench.output
    assert not workdir.exists()
    arena = _arena([str(problem), "--solutions", str(solution.parent), "--device", "cpu", "--out", str(tmp_path / "o"),
                    "--json"])
    assert arena.exit_code == 0, arena.output
    row = json.loads(arena.stdout)["problems"][0]
    assert row["status"] == "skipped" and "batch_size 4096, dim 393216" in row["message"], row


def test_ctrl_c_says_where_the_results_are(tmp_path, monkeypatch):
    """A new user's trial: Ctrl-C in an arena run ended it with exit 130 and nothing said."""
    import autokernel.arena.run as arena_run

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(arena_run, "run_arena", interrupted)
    problem = tmp_path / "p.py"
    problem.write_text("import torch\n")
    result = _arena([str(problem), "--solutions", str(tmp_path), "--out", str(tmp_path / "o"), "--device", "cpu"])
    assert result.exit_code == 130 and "interrupted" in result.output and "run the same command again" in result.output


def test_a_solutions_folder_that_answers_no_problem_is_named(tmp_path):
    """New-user trial: `arena level1 --solutions sols/` with sols/ holding files named otherwise
    (or the wrong level's) counted every problem as failed with no word about the names."""
    sols = tmp_path / "sols"
    sols.mkdir()
    (sols / "relu_solution.py").write_text("x = 1\n")
    result = _arena([str(ROOT / "examples" / "kernelbench_example.py"), "--solutions", str(sols),
                     "--out", str(tmp_path / "o"), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "no file in" in result.stderr and "kernelbench_example.py" in result.stderr, result.stderr


def test_arena_optimize_that_stopped_early_says_why(tmp_path, monkeypatch):
    """New-user trial: `arena --optimize --agent llm` against a model that sent the placeholder
    back said "no-solution: 25 experiment(s), stopped: all-done; no correct kernel kept" after 7 s
    of a 60 s budget: not that the loop was done because the agent proposed no new kernel."""
    stuck = "the agent proposed no new kernel in 25 tries in a row (last: the proposed file is identical)"
    row = _optimized_example_row(monkeypatch, tmp_path, "all-done", lambda name: f"{name}: {stuck}", 25)
    assert row["message"].startswith(f"25 experiment(s), stopped: all-done ({stuck}); no correct kernel kept"), row
