"""``autokernel run`` end to end on the shipped examples (CPU, Triton interpreter, tiny
models, a budget of ten seconds: the loop gets through the first evaluations)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.cli import app  # noqa: E402

ONE_LAYER = {"llama": "n_layers=1", "gpt2": "n_layer=1", "bert": "n_layers=1"}


@pytest.mark.parametrize("model", ["llama", "gpt2", "bert"])
def test_run_on_each_example(tmp_path, model, capfd):
    wd = tmp_path / model
    args = ["run", "--model", model, "--workdir", str(wd), "--device", "cpu", "--budget", "10s",
            "--input-shape", "1x8", "--config", ONE_LAYER[model], "--timeout", "120"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    plan = json.loads((wd / "plan.json").read_text())
    assert plan["model"] == model and plan["problems"]
    assert sum(p["fraction"] for p in plan["problems"]) <= 1.0 + 1e-9
    rows = (wd / "results.tsv").read_text().splitlines()
    assert len(rows) >= 2, res.output  # header + at least one experiment
    verified = json.loads((wd / "verify.json").read_text())
    assert verified["passed"] is True
    assert verified["timing_kind"] == "cpu"
    report = (wd / "report.md").read_text()
    assert "PASS" in report and model in report
    assert (wd / "progress.png").is_file() and not (wd / "roofline.png").exists()  # no roofline on CPU
    run = json.loads((wd / "run.json").read_text())
    assert run["model"] == model and run["device"] == "cpu"

    if model == "llama":
        import subprocess

        def git(*a):
            return subprocess.run(["git", *a], cwd=wd, capture_output=True, text=True, check=True).stdout

        # issue 10: the branch is named after the model, the artifacts leave the tree clean,
        # the profiler's USDT lines stay off the terminal
        assert git("rev-parse", "--abbrev-ref", "HEAD").strip() == "autokernel/llama"
        assert git("status", "--porcelain") == ""
        assert "USDT" not in capfd.readouterr().err
        # issue 10: a finished run run again says so and shows its report, spending nothing
        results, verify_json = (wd / "results.tsv").read_text(), (wd / "verify.json").read_text()
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        assert "finished" in res.output and "--extend" in res.output and "rmsnorm" in res.output
        assert (wd / "results.tsv").read_text() == results and (wd / "verify.json").read_text() == verify_json
        assert "not used" not in res.output
        # options a finished run does not take are named, not dropped in silence
        res = CliRunner().invoke(app, [*args, "--seed", "7", "--budget", "5m"])
        assert res.exit_code == 0, res.output
        out = " ".join(res.output.split())
        assert "not used, since nothing runs" in out and "--seed 7 (the run's: 0)" in out and "--budget 5m" in out
        res = CliRunner().invoke(app, [*args, "--extend", "2s"])
        assert res.exit_code == 0, res.output
        assert "extending" in res.output and json.loads((wd / "run.json").read_text())["finished"] is True
        # the same workdir for another model is refused before anything is written
        res = CliRunner().invoke(app, ["run", "--model", "gpt2", "--workdir", str(wd), "--device", "cpu",
                                       "--input-shape", "1x8", "--config", ONE_LAYER["gpt2"]])
        assert res.exit_code == 2 and "other settings" in res.output
        assert "model 'llama' -> 'gpt2'" in " ".join(res.output.split())  # which, not only that they differ
        assert json.loads((wd / "plan.json").read_text())["model"] == "llama"


NOTHING_SUPPORTED = '''
import torch
from torch import nn


class Scan(nn.Module):
    """Only ops autokernel has no kind for."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(16))

    def forward(self, x):
        return torch.cumsum(x * self.scale, dim=-1).relu()
'''


def test_run_on_a_model_with_nothing_supported(tmp_path):
    path = tmp_path / "scan.py"
    path.write_text(NOTHING_SUPPORTED)
    wd = tmp_path / "wd"
    res = CliRunner().invoke(app, ["run", "--model", f"{path}:Scan", "--workdir", str(wd), "--device", "cpu",
                                   "--input-shape", "4x16", "--budget", "10s"])
    assert res.exit_code == 0, res.output
    assert "nothing" in res.output and "supports" in res.output
    assert json.loads((wd / "plan.json").read_text())["problems"] == [] or \
        not any(p["supported"] for p in json.loads((wd / "plan.json").read_text())["problems"])
    assert not (wd / "results.tsv").exists()


@pytest.mark.parametrize("args, message", [
    (["--budget", "soon"], "budget"),
    (["--model", "nowhere.py:Net"], "not found"),
    (["--input-shape", "1xa"], "input shape"),
    (["--device", "tpu"], "device"),
])
def test_run_bad_input_is_one_line_exit_2(tmp_path, args, message):
    res = CliRunner().invoke(app, ["run", "--workdir", str(tmp_path / "wd"), *args])
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "wd").exists()


def test_run_defaults_its_workdir_to_runs_and_the_model_name():
    from autokernel.cli.pipeline_cmd import default_workdir

    assert default_workdir("llama") == Path("runs") / "llama"
    assert default_workdir("hf:llama") == Path("runs") / "hf-llama"
    assert default_workdir("examples/my model.py:Net") == Path("runs") / "my-model"


def test_a_resumed_run_gets_what_is_left_of_its_budget_and_extend_needs_a_finished_run(tmp_path, monkeypatch):
    """A 3m run interrupted three times ran 5m40s: each resume started the budget over.  Now
    run.json records the time spent and a resume gets the rest; --extend on a workdir with no
    run did a full default run (10m) instead of refusing; --extend on an unfinished one too."""
    import autokernel.loop.optimize as optimize_mod
    from autokernel.pipeline import PipelineError, RunOptions, run_pipeline

    budgets = []

    class Stopped:
        stopped_reason = "interrupted"

    def fake_optimize(targets, workdir, *, budget_s, **kwargs):
        budgets.append(budget_s)
        time.sleep(0.3)
        return Stopped()

    monkeypatch.setattr(optimize_mod, "run_optimize", fake_optimize)
    wd = tmp_path / "wd"

    def opts(**kw):
        return RunOptions(workdir=wd, model="llama", device="cpu", input_shape=[1, 8], config={"n_layers": "1"},
                          **{"budget_s": 100.0, **kw})

    with pytest.raises(PipelineError, match="--extend adds time to a finished run"):
        run_pipeline(opts(extend_s=30.0), log=lambda m: None)
    assert not wd.exists()
    assert run_pipeline(opts(), log=lambda m: None).interrupted
    spent = json.loads((wd / "run.json").read_text())["spent_s"]
    assert 0.3 <= spent < 100 and budgets[0] <= 100.0
    lines = []
    run_pipeline(opts(), log=lines.append)
    assert budgets[1] <= 100.0 - spent and any("spent before" in line for line in lines)
    assert json.loads((wd / "run.json").read_text())["spent_s"] > spent
    with pytest.raises(PipelineError, match="has not finished"):
        run_pipeline(opts(extend_s=30.0), log=lambda m: None)
    # resumed without --budget: the run's own 100 s, not the default for the device (10m), and a
    # new seed is said and recorded beside the one the earlier sessions used
    spent = json.loads((wd / "run.json").read_text())["spent_s"]
    lines = []
    run_pipeline(opts(budget_s=None, seed=3), log=lines.append)
    assert budgets[-1] <= 100.0 - spent
    assert any("seed 3, where the run had 0, from here on" in line for line in lines)
    run = json.loads((wd / "run.json").read_text())
    assert run["budget"] == "1m40s" and run["seed"] == 3 and run["earlier_seeds"] == [0]
    lines = []
    run_pipeline(opts(budget_s=200.0, seed=3), log=lines.append)
    assert budgets[-1] > 100.0 and any("budget 3m20s (--budget), where the run had 1m40s" in line for line in lines)
    assert json.loads((wd / "run.json").read_text())["earlier_seeds"] == [0]
    # resumed without --seed: the run's own 3, not a silent 0 (a new user's trial: "seed 0, where the
    # run had 3, from here on" for a --seed never given)
    lines = []
    run_pipeline(opts(budget_s=200.0), log=lines.append)
    assert not any("seed" in line for line in lines), lines
    assert json.loads((wd / "run.json").read_text())["seed"] == 3


def test_an_interrupted_extension_resumes_with_the_same_command(tmp_path, monkeypatch):
    """A new user's trial: Ctrl-C during `run --extend 1m` said "run the same command again to
    resume", and that command was refused ("has not finished: run the same command (without
    --extend)")."""
    import autokernel.loop.optimize as optimize_mod
    from autokernel.pipeline import RunOptions, run_pipeline

    budgets, stop = [], ["done"]

    class Summary:
        def __init__(self):
            self.stopped_reason = stop[0]

    def fake_optimize(targets, workdir, *, budget_s, **kwargs):
        budgets.append(budget_s)
        time.sleep(0.2)
        return Summary()

    monkeypatch.setattr(optimize_mod, "run_optimize", fake_optimize)  # nothing evaluated: no verify
    wd = tmp_path / "wd"

    def opts(**kw):
        return RunOptions(workdir=wd, model="llama", device="cpu", input_shape=[1, 8], config={"n_layers": "1"},
                          **{"budget_s": 100.0, **kw})

    run_pipeline(opts(), log=lambda m: None)
    run = json.loads((wd / "run.json").read_text())
    assert run["finished"] is True and not run.get("extending")
    stop[0] = "interrupted"
    assert run_pipeline(opts(budget_s=None, extend_s=60.0), log=lambda m: None).interrupted
    run = json.loads((wd / "run.json").read_text())
    assert run["extending"] is True and not run.get("finished")
    lines: list[str] = []
    stop[0] = "done"
    run_pipeline(opts(budget_s=None, extend_s=60.0), log=lines.append)  # the same command: resumed
    assert any("resuming the extension" in line for line in lines), lines
    assert budgets[-1] <= budgets[-2] and json.loads((wd / "run.json").read_text())["finished"] is True


def test_a_workdir_another_live_process_works_in_is_refused_before_anything_is_written(tmp_path):
    """A new user's trial: `run` into a workdir an `optimize` held profiled the model and wrote
    plan.json and run.json there before the loop found the lock."""
    from autokernel.loop.workspace import LOCK_NAME, WorkspaceError
    from autokernel.pipeline import RunOptions, run_pipeline

    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / LOCK_NAME).write_text(f"{os.getppid()}\n")  # a live process that is not this one
    with pytest.raises(WorkspaceError, match="in use by process"):
        run_pipeline(RunOptions(workdir=wd, model="llama", device="cpu", input_shape=[1, 8], config={"n_layers": "1"},
                                budget_s=30.0), log=lambda m: None)
    assert sorted(p.name for p in wd.iterdir()) == [LOCK_NAME]


def test_a_misconfigured_agent_is_refused_before_anything_is_written(tmp_path):
    """`run --agent llm` without --llm profiled and wrote plan.json and run.json before its error."""
    wd = tmp_path / "wd"
    res = CliRunner().invoke(app, ["run", "--model", "llama", "--workdir", str(wd), "--device", "cpu",
                                   "--input-shape", "1x8", "--config", "n_layers=1", "--agent", "llm"])
    assert res.exit_code == 2 and "--llm" in res.output, res.output
    assert not (wd / "plan.json").exists() and not (wd / "run.json").exists()
    res = CliRunner().invoke(app, ["run", "--model", "llama", "--workdir", str(wd), "--device", "cpu", "--extend", "abc"])
    assert res.exit_code == 2 and "--extend" in res.output, res.output


def test_a_workdir_clash_names_only_the_config_keys_that_differ():
    """The clash message printed both whole config dicts (490 characters for one changed key)."""
    from autokernel.pipeline import _run_differences

    saved = {"model": "hf:qwen3", "dtype": "fp32", "input_shape": [2, 32],
             "config": {"hidden_size": "64", "intermediate_size": "128", "vocab_size": "512"}}
    wanted = dict(saved, config={"hidden_size": "64", "intermediate_size": "96", "vocab_size": "512", "head_dim": "16"})
    assert _run_differences(saved, wanted) == ["config head_dim '(default)' -> '16'",
                                               "config intermediate_size '128' -> '96'"]


def test_a_budget_spent_in_the_profile_skips_verify_and_the_report_says_so(tmp_path):
    """New-user trial: a model too big for the budget spent it profiling; the run then verified an
    unpatched model for minutes (and its breakdown compared two profiles of the same model), said
    PASS, left spent_s at 0 and wrote a report saying the run was not finished and that nothing
    had been kept, as if kernels had been tried.  Every run's report also said "not finished": it
    was written before run.json was marked finished."""
    from autokernel.pipeline import RunOptions, run_pipeline

    wd = tmp_path / "wd"
    lines = []
    result = run_pipeline(RunOptions(workdir=wd, model="llama", device="cpu", input_shape=[1, 8],
                                     config={"n_layers": "1"}, budget_s=1e-3), log=lines.append)
    assert result.nothing_evaluated and result.verify is None
    assert not (wd / "verify.json").exists()
    assert any("verify: skipped, no kernel was evaluated" in line and "--extend" in line for line in lines)
    run = json.loads((wd / "run.json").read_text())
    assert run["finished"] is True and run["spent_s"] > 1e-3
    report = (wd / "report.md").read_text()
    assert "not finished" not in report and "No kernel was evaluated" in report


def test_the_run_says_verifys_notes(tmp_path, monkeypatch):
    """New-user trial (hf:t5): `autokernel run` printed "replaced: 22 place(s)" and PASS, while
    verify had noted that one kind was installed but never called; only a standalone `verify`
    and report.md said so."""
    from types import SimpleNamespace

    import autokernel.integrate
    import autokernel.loop.optimize
    import autokernel.report
    import autokernel.verify
    from autokernel.pipeline import RunOptions, run_pipeline

    note = "installed but not called on these inputs: attention_masked"
    monkeypatch.setattr(autokernel.loop.optimize, "run_optimize",
                        lambda *a, **k: SimpleNamespace(stopped_reason="budget"))
    monkeypatch.setattr(autokernel.integrate, "read_results", lambda workdir: ["a row"])
    monkeypatch.setattr(autokernel.verify, "verify", lambda *a, **k: SimpleNamespace(message=note, passed=True))
    monkeypatch.setattr(autokernel.report, "write_report", lambda workdir: "report")
    lines = []
    run_pipeline(RunOptions(workdir=tmp_path / "wd", model="llama", device="cpu", input_shape=[1, 8],
                            config={"n_layers": "1"}, budget_s=600), log=lines.append)
    assert any(line.strip() == f"note: {note}" for line in lines), lines


def test_run_plans_the_fused_mlp_when_asked(tmp_path):
    """New-user trial: `profile` had --fused-mlp and `run` did not."""
    from autokernel.cli import app
    from autokernel.plan import load_plan
    from typer.testing import CliRunner

    wd = tmp_path / "wd"
    result = CliRunner().invoke(app, ["run", "--model", "llama", "--config", "n_layers=1", "--input-shape", "1x8",
                                      "--device", "cpu", "--fused-mlp", "--budget", "1s", "--workdir", str(wd)])
    assert result.exit_code == 0, result.output
    assert "fused_mlp" in {p.kind for p in load_plan(wd / "plan.json").problems}
    assert "--fused-mlp: no SwiGLU MLP" not in result.output  # it found one: no note
    assert json.loads((wd / "run.json").read_text())["fused_mlp"] is True


def test_run_says_when_the_fused_mlp_finds_no_swiglu_mlp(tmp_path):
    """The GPT-2 example's MLP is fc2(gelu(fc1(x))): `run --fused-mlp` planned it as without the
    flag, and said nothing."""
    from autokernel.cli import app
    from autokernel.plan import load_plan
    from typer.testing import CliRunner

    wd = tmp_path / "wd"
    result = CliRunner().invoke(app, ["run", "--model", "gpt2", "--config", "n_layer=1", "--input-shape", "1x8",
                                      "--device", "cpu", "--fused-mlp", "--budget", "1s", "--workdir", str(wd)])
    assert result.exit_code == 0, result.output
    assert "fused_mlp" not in {p.kind for p in load_plan(wd / "plan.json").problems}
    assert "--fused-mlp: no SwiGLU MLP here" in result.output


def test_another_model_in_a_run_dir_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """A run dir of a small hf:granite given `run --model hf:apertus` (default size) built, or refused
    for memory, the 7B model before naming the run it holds."""
    from autokernel import models
    from autokernel.plan import Plan, save_plan

    wd = tmp_path / "wd"
    wd.mkdir()
    save_plan(Plan(model="hf:granite", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[2, 64],
                   total_time_us=1.0, problems=[]), wd / "plan.json")
    (wd / "run.json").write_text(json.dumps({"model": "hf:granite", "dtype": "fp32", "device": "cpu",
                                             "input_shape": [2, 64], "config": {"hidden_size": "128"}}))

    def no_build(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(models, "load_model", no_build)
    res = CliRunner().invoke(app, ["run", "--model", "hf:apertus", "--workdir", str(wd), "--device", "cpu"])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "already holds a run of 'hf:granite'" in out, res.output
    assert "model 'hf:granite' -> 'hf:apertus'" in out and "config hidden_size '128' -> '(default)'" in out
    assert "input_shape" not in out  # left to the model's default: not known before it is built
    res = CliRunner().invoke(app, ["run", "--model", "hf:granite", "--config", "hidden_size=128", "--input-shape",
                                   "1x8", "--workdir", str(wd), "--device", "cpu"])
    assert res.exit_code == 2 and "input_shape [2, 64] -> [1, 8]" in " ".join(res.output.split()), res.output
