"""The workspace: git repository, branch, lock, refusal of foreign dirty repos, recovery."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from autokernel.loop.results import ExperimentRecord, append_result, read_results
from autokernel.loop.workspace import WorkspaceError, WorkspaceLock, open_workspace


def git(root: Path, *args: str, check=True) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=check).stdout


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def setup_problem(ws, name="softmax", text="KNOBS = {}\n"):
    ws.kernel_path(name).parent.mkdir(parents=True, exist_ok=True)
    ws.kernel_path(name).write_text(text)
    append_result(ws.results_path, ExperimentRecord(0, name, "tuner", "baseline", latency_us=10.0))
    ws.commit([ws.kernel_path(name), ws.results_path], f"setup {name}")


def test_creates_repo_on_branch_with_ignores(tmp_path):
    ws = open_workspace(tmp_path / "new", "my run")
    try:
        assert ws.branch == "autokernel/my-run"
        assert git(ws.root, "rev-parse", "--abbrev-ref", "HEAD").strip() == "autokernel/my-run"
        ignore = (ws.root / ".gitignore").read_text().splitlines()
        assert "logs/" in ignore and ".autokernel.lock" in ignore
        assert (ws.root / ".autokernel.lock").read_text().strip() == str(os.getpid())
        assert ws.is_clean()
    finally:
        ws.close()
    assert not (tmp_path / "new/.autokernel.lock").exists()


def test_refuses_dirty_foreign_repo_without_touching_it(tmp_path):
    repo = tmp_path / "theirs"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "--allow-empty", "-m", "init")
    (repo / "code.py").write_text("x = 1\n")
    git(repo, "add", "code.py")
    git(repo, "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "-m", "code")
    (repo / "code.py").write_text("x = 2\n")  # uncommitted change
    before = snapshot(repo)
    with pytest.raises(WorkspaceError, match="not an autokernel workspace"):
        open_workspace(repo, "run")
    with pytest.raises(WorkspaceError, match="uncommitted"):  # even when allowed explicitly
        open_workspace(repo, "run", allow_existing_repo=True)
    assert snapshot(repo) == before
    assert git(repo, "branch", "--list").strip() in ("* master", "* main")


def test_clean_foreign_repo_is_refused_unless_asked_then_gets_its_own_branch(tmp_path):
    repo = tmp_path / "theirs"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    git(repo, "add", "code.py")
    git(repo, "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "-m", "code")
    main = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
    before = snapshot(repo)
    with pytest.raises(WorkspaceError, match="--use-existing-repo"):  # issue 10: refused unless asked for
        open_workspace(repo, "r1")
    assert snapshot(repo) == before and git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == main
    ws = open_workspace(repo, "r1", allow_existing_repo=True)
    ws.close()
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "autokernel/r1"
    assert git(repo, "log", "--format=%s", main).splitlines() == ["code"]  # their branch untouched
    assert git(repo, "config", "--local", "--get", "user.email", check=False).strip() == ""


def test_live_lock_refuses_and_stale_lock_is_taken_over(tmp_path):
    root = tmp_path / "ws"
    ws = open_workspace(root, "r")
    ws.close()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (root / ".autokernel.lock").write_text(f"{sleeper.pid}\n")
        with pytest.raises(WorkspaceError, match="in use"):
            open_workspace(root, "r")
    finally:
        sleeper.kill()
        sleeper.wait()
    ws = open_workspace(root, "r")  # the holder is dead now: stale, taken over
    assert WorkspaceLock(root / ".autokernel.lock").owner() == os.getpid()
    ws.close()


def test_recovery_after_abrupt_stop(tmp_path):
    root = tmp_path / "ws"
    ws = open_workspace(root, "r")
    setup_problem(ws)
    good = ws.kernel_path("softmax").read_text()
    # an experiment was half done: kernel.py overwritten, a partial row, a stale git index lock
    ws.kernel_path("softmax").write_text("garbage\n")
    with open(ws.results_path, "a") as fh:
        fh.write("1\tsoftmax\ttuner\tkee")
    (root / ".git/index.lock").write_text("")
    (ws.problem_dir("softmax") / "scratch.txt").write_text("agent litter")
    os.unlink(root / ".autokernel.lock")
    (root / ".autokernel.lock").write_text("999999999\n")  # a dead pid
    ws.lock.held = False
    ws2 = open_workspace(root, "r")
    try:
        assert ws2.kernel_path("softmax").read_text() == good
        assert [r.experiment for r in read_results(ws2.results_path)] == [0]
        assert ws2.is_clean()
        assert ws2.recovered
    finally:
        ws2.close()


def test_recovery_commits_a_complete_keep_row_with_its_kernel(tmp_path):
    root = tmp_path / "ws"
    ws = open_workspace(root, "r")
    setup_problem(ws)
    # killed after the row of a kept experiment was written, before the commit
    candidate = ws.candidate_path("softmax", 1)
    candidate.write_text("KNOBS = {'x': 1}\n")
    ws.kernel_path("softmax").write_text(candidate.read_text())
    append_result(ws.results_path, ExperimentRecord(1, "softmax", "tuner", "keep", latency_us=5.0,
                                                    speedup_vs_start=2.0, description="x 0→1"))
    ws.close()
    ws2 = open_workspace(root, "r")
    ws2.close()
    assert git(root, "log", "-1", "--format=%s").strip() == "exp 1 softmax: x 0→1 (2x vs start)"
    assert git(root, "show", "HEAD:problems/softmax/kernel.py") == "KNOBS = {'x': 1}\n"
    assert git(root, "status", "--porcelain") == ""


def test_new_run_branches_from_the_workspace_root(tmp_path):
    root = tmp_path / "ws"
    ws = open_workspace(root, "first")
    setup_problem(ws)
    ws.close()
    ws = open_workspace(root, "second")
    ws.close()
    assert not (root / "problems").exists() and not (root / "results.tsv").exists()
    ws = open_workspace(root, "first")  # back to the first run: its state is there
    ws.close()
    assert (root / "problems/softmax/kernel.py").exists()


def test_report_and_export_name_the_other_runs_and_take_one_by_run(tmp_path):
    """A new user's trial: `optimize rmsnorm` then `optimize softmax` in one --workdir left the
    rmsnorm run on a branch that `report` and `export` never mentioned (they read the run checked
    out).  Both now name the other runs, and `--run NAME` checks one out and reads it."""
    from typer.testing import CliRunner

    from autokernel.cli import app

    root = tmp_path / "ws"
    for name in ("rmsnorm", "softmax"):
        ws = open_workspace(root, name)
        info = ws.kernel_path(name).parent / "problem.json"
        info.parent.mkdir(parents=True)
        info.write_text(json.dumps({"name": name, "kind": name}))
        setup_problem(ws, name)
        ws.commit([info], f"{name}'s problem.json")
        ws.close()
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(root)])
    assert res.exit_code == 0, res.output
    assert "also holds rmsnorm (rmsnorm)" in res.output and "--run NAME" in res.output
    assert "softmax" in (root / "report.md").read_text() and "rmsnorm" not in (root / "report.md").read_text()
    res = runner.invoke(app, ["report", str(root), "--run", "rmsnorm"])
    assert res.exit_code == 0, res.output
    assert "rmsnorm" in (root / "report.md").read_text() and "also holds softmax (softmax)" in res.output
    res = runner.invoke(app, ["export", str(root), "--run", "softmax", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["README.md", "softmax.py"]
    assert "also holds rmsnorm (rmsnorm)" in res.output
    res = runner.invoke(app, ["report", str(root), "--run", "gelu"])
    assert res.exit_code == 2 and "holds no run named 'gelu': its runs are rmsnorm, softmax" in res.output
