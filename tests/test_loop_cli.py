"""``autokernel optimize`` end to end on the CPU interpreter with the real harness: a short run
on two kinds, Ctrl-C, kill -9 and resume; and bad inputs (exit 2, nothing modified)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autokernel.cli import app
from autokernel.loop.results import read_results

ENV = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1"}
CLI = [sys.executable, "-m", "autokernel"]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- bad input
def _invoke(*args: str):
    return CliRunner().invoke(app, ["optimize", *args])


@pytest.mark.parametrize("args,words", [
    (["--problem", "no_such_kind"], "unknown problem"),
    (["--budget", "ten minutes", "--problem", "reduce"], "budget"),
    (["--problem", "reduce", "--plan", "plan.json"], "exactly one"),
    ([], "exactly one"),
    (["--problem", "reduce", "--shape", "12xbanana"], "shape"),
    (["--problem", "reduce", "--agent", "oracle"], "unknown agent"),
    (["--problem", "reduce", "--agent", "command"], "--agent-cmd"),
    (["--plan", "missing-plan.json"], "plan file not found"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, args, words):
    work = tmp_path / "ws"
    result = _invoke(*args, "--workdir", str(work))
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not work.exists()


def test_cuda_without_gpu_exits_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    result = _invoke("--problem", "reduce", "--device", "cuda", "--workdir", str(tmp_path / "ws"))
    assert result.exit_code == 2 and "no CUDA GPU" in result.output
    assert not (tmp_path / "ws").exists()


def test_dirty_foreign_repo_exits_2_untouched(tmp_path):
    repo = tmp_path / "theirs"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("1\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "-m", "a")
    (repo / "a.txt").write_text("2\n")
    before = snapshot(repo)
    result = _invoke("--problem", "reduce", "--workdir", str(repo))
    assert result.exit_code == 2 and "not an autokernel workspace" in result.output
    result = _invoke("--problem", "reduce", "--workdir", str(repo), "--use-existing-repo")
    assert result.exit_code == 2 and "uncommitted" in result.output
    assert snapshot(repo) == before


# --------------------------------------------------------------------------- real runs
def test_short_run_on_two_kinds_then_bench(tmp_path):
    # In this process (CliRunner), not a subprocess: the judge's forkserver, started once per
    # process, is shared with the other tests and the two benches instead of being started three
    # times. `python -m autokernel optimize` as a real process is test_ctrl_c_kill_9_and_resume's.
    work = tmp_path / "ws"
    proc = _invoke("--problem", "reduce", "--problem", "softmax", "--workdir", str(work), "--max-experiments", "1",
                   "--device", "cpu", "--dtype", "fp32", "--seed", "1")
    assert proc.exit_code == 0, proc.output[-3000:]
    assert "stopped: max-experiments" in proc.output
    rows = read_results(work / "results.tsv")
    assert sorted((r.problem, r.experiment) for r in rows) == [(p, n) for p in ("reduce", "softmax") for n in range(2)]
    assert git(work, "status", "--porcelain") == ""
    for name in ("reduce", "softmax"):
        mine = [r for r in rows if r.problem == name]
        assert mine[0].status == "baseline" and mine[0].latency_us > 0
        kept = {r.experiment for r in mine if r.status == "keep"}
        changed = git(work, "log", "--format=%s", "--", f"problems/{name}/kernel.py").splitlines()
        assert len(changed) == 1 + len(kept)  # the setup commit and one commit per kept experiment
        assert all(s.startswith(tuple(f"exp {n} {name}:" for n in kept)) for s in changed[:-1])
        bench = CliRunner().invoke(app, ["bench", str(work / "problems" / name / "kernel.py"), "--problem", name,
                                         "--dtype", "fp32"])
        assert bench.exit_code == 0, bench.output[-2000:]

    # the README's next steps on this workspace of single problems (issue 10): no model to
    # verify, said plainly; a report; an export; the tree stays clean
    verify = CliRunner().invoke(app, ["verify", str(work)])
    assert verify.exit_code == 2 and "needs a run made from" in verify.output
    report = CliRunner().invoke(app, ["report", str(work)])
    assert report.exit_code == 0, report.output
    assert "reduce" in (work / "report.md").read_text()
    export = CliRunner().invoke(app, ["export", str(work), "--format", "package", "--out", str(tmp_path / "pkg")])
    assert export.exit_code == 0, export.output
    assert (tmp_path / "pkg" / "pyproject.toml").is_file()
    assert git(work, "status", "--porcelain") == ""


def test_readme_commands_parse():
    """Every `autokernel ...` line of the README names a command and flags that exist, with
    values that parse (the runs themselves are in the tests of each command)."""
    import re
    import shlex

    import typer

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    group = typer.main.get_command(app)
    lines = [ln.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", readme, re.S)
             for ln in block.replace("\\\n", " ").splitlines() if ln.strip().startswith("autokernel ")]
    assert len(lines) >= 15
    for line in lines:
        args = shlex.split(line)[1:]
        args = args[: args.index(">")] if ">" in args else args
        parent = group.make_context("autokernel", [], resilient_parsing=True)
        cmd = group.get_command(parent, args[0])
        assert cmd is not None, line
        cmd.make_context(args[0], args[1:], parent=parent)  # raises on an unknown flag or a bad value


def _wait_for_rows(work: Path, n: int, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if len(read_results(work / "results.tsv")) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"optimize ended early: {proc.stderr.read()[-2000:]}")
        time.sleep(0.2)
    raise AssertionError("no progress")


def test_ctrl_c_kill_9_and_resume(tmp_path):
    work = tmp_path / "ws"
    args = [*CLI, "optimize", "--problem", "reduce", "--workdir", str(work), "--device", "cpu", "--dtype", "fp32",
            "--max-experiments", "40", "--seed", "2"]
    # Ctrl-C in the middle of the run: exit 130, one line, clean tree
    proc = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _wait_for_rows(work, 2, proc)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "resume" in err
    assert git(work, "status", "--porcelain") == ""
    assert not (work / ".autokernel.lock").exists()
    after_int = read_results(work / "results.tsv")

    # kill -9 in the middle of the next run
    proc = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _wait_for_rows(work, len(after_int) + 1, proc)
        time.sleep(0.7)  # somewhere inside the next experiment
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        time.sleep(0.5)
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the orphaned evaluation worker, if any
        except ProcessLookupError:
            pass
    assert (work / ".autokernel.lock").exists()  # left behind by the dead process
    after_kill = read_results(work / "results.tsv")
    total = len([r for r in after_kill if r.status != "baseline"]) + 1

    # rerun: recovers (no partial row, clean tree, lock taken over) and continues the numbering
    proc = subprocess.run([*args[:-4], "--max-experiments", str(total), "--seed", "2"], env=ENV,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_results(work / "results.tsv")
    assert [r.experiment for r in rows] == list(range(total + 1))
    assert [r.to_line() for r in rows[:len(after_kill)]] == [r.to_line() for r in after_kill]
    assert (work / "results.tsv").read_text().endswith("\n")
    assert git(work, "status", "--porcelain") == ""
    assert not (work / ".autokernel.lock").exists()
    # the tuner never proposed the same configuration twice, across the three invocations
    from autokernel.agents.tuner import parse_knobs

    logs = next((work / "logs").glob("*/reduce"))
    configs = [repr(sorted(parse_knobs((logs / f"exp_{r.experiment:04d}.py").read_text()).knobs.items()))
               for r in rows]
    assert len(configs) == len(set(configs))


def test_a_workdir_that_cannot_be_created_exits_2(tmp_path):
    """New-user trial: `optimize --workdir` under a file (or /proc) was a FileNotFoundError
    traceback, exit 1; `run` and `profile` refused it up front already."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    result = _invoke("--problem", "reduce", "--device", "cpu", "--workdir", str(blocker / "ws"))
    assert result.exit_code == 2 and "--workdir" in result.output and "cannot write" in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
