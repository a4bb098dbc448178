"""The command agent: an external program edits kernel.py; the tool owns git."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from agent_stubs import KERNEL, make_context
from autokernel.agents.base import AgentConfig, AgentConfigError, make_agent
from autokernel.agents.command import CommandAgent

FAKE_KEY = "sk-test-COMMANDKEY-77aa00"
_GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t"}


def git(root, *args) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True,
                          env={**os.environ, **_GIT_ENV}).stdout


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A git workspace like the loop's: problems/rowsum/kernel.py, results.tsv, ignored logs/."""
    for k, v in _GIT_ENV.items():
        monkeypatch.setenv(k, v)
    root = tmp_path / "ws"
    pdir = root / "problems" / "rowsum"
    pdir.mkdir(parents=True)
    (pdir / "kernel.py").write_text(KERNEL)
    (root / "results.tsv").write_text("experiment\tstatus\n")
    (root / ".gitignore").write_text("logs/\n")
    git(root, "init", "-q", "-b", "autokernel/run")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "workspace")
    log_dir = root / "logs" / "run" / "rowsum"
    ctx = make_context(pdir, extra={"log_dir": str(log_dir)}, experiment=3)
    return root, ctx


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(body))
    return f"{sys.executable} {path} {{prompt_file}}"


EDIT = """
import pathlib, sys
prompt = pathlib.Path(sys.argv[1]).read_text()
assert "autokernel bench kernel.py --problem rowsum" in prompt
k = pathlib.Path("kernel.py")
k.write_text(k.read_text().replace('"BLOCK_N": 256', '"BLOCK_N": 512'))
print("working...")
print("raise BLOCK_N to 512")
"""


def test_edit_of_kernel_py_is_the_proposal(workspace, tmp_path):
    root, ctx = workspace
    head = git(root, "rev-parse", "HEAD")
    proposal = CommandAgent(_script(tmp_path, EDIT), timeout_s=60).propose(ctx)
    assert proposal.rejected_reason is None
    assert proposal.source == KERNEL.replace('"BLOCK_N": 256', '"BLOCK_N": 512')
    assert proposal.description == "raise BLOCK_N to 512"
    assert (root / "problems/rowsum/kernel.py").read_text() == proposal.source
    assert git(root, "rev-parse", "HEAD") == head
    assert git(root, "status", "--porcelain") == " M problems/rowsum/kernel.py\n"
    prompt_file = root / "logs/run/rowsum/command-0003-prompt.md"
    assert "Do not commit" in prompt_file.read_text()


ROGUE = """
import os, pathlib, subprocess, sys
k = pathlib.Path("kernel.py")
k.write_text(k.read_text().replace('"num_warps": 4}', '"num_warps": 8}'))
pathlib.Path("../../results.tsv").write_text("forged\\n")
pathlib.Path("notes.txt").write_text("scratch")
pathlib.Path("../../newdir/deep").mkdir(parents=True)
pathlib.Path("../../newdir/deep/x.py").write_text("x = 1")
run = lambda *a: subprocess.run(["git", *a], check=True, capture_output=True)
run("add", "-A")
run("commit", "-q", "-m", "agent commit on the run branch")
run("tag", "agent-tag")
run("checkout", "-q", "-b", "agent-branch")
pathlib.Path("other.py").write_text("y = 2")
run("add", "other.py")
run("commit", "-q", "-m", "agent commit on its own branch")
pathlib.Path("../../results.tsv").write_text("forged again\\n")
run("stash", "-u")
print("eight warps")
"""


def test_commits_branches_and_other_edits_are_undone(workspace, tmp_path):
    root, ctx = workspace
    head = git(root, "rev-parse", "HEAD")
    proposal = CommandAgent(_script(tmp_path, ROGUE), timeout_s=60).propose(ctx)
    expected = KERNEL.replace('"num_warps": 4}', '"num_warps": 8}')
    assert proposal.source == expected and proposal.description == "eight warps"
    assert git(root, "rev-parse", "HEAD") == head
    assert git(root, "symbolic-ref", "HEAD").strip() == "refs/heads/autokernel/run"
    assert "agent commit" not in git(root, "log", "--all", "--format=%s")
    assert git(root, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/autokernel/run"]
    assert (root / "results.tsv").read_text() == "experiment\tstatus\n"
    assert not (root / "problems/rowsum/notes.txt").exists()
    assert not (root / "problems/rowsum/other.py").exists()
    assert not (root / "newdir").exists()
    assert (root / "problems/rowsum/kernel.py").read_text() == expected
    assert git(root, "status", "--porcelain") == " M problems/rowsum/kernel.py\n"
    undone = (root / "logs/run/rowsum/command-0003-undone.txt").read_text()
    assert "deleted refs/tags/agent-tag" in undone and "deleted refs/heads/agent-branch" in undone


def test_timeout_kills_the_process_group(workspace, tmp_path):
    root, ctx = workspace
    pid_file = tmp_path / "child.pid"
    body = f"""
    import pathlib, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    pathlib.Path({str(pid_file)!r}).write_text(str(child.pid))
    k = pathlib.Path("kernel.py")
    k.write_text(k.read_text() + "\\nTRAILER = 1\\n")
    time.sleep(120)
    """
    start = time.monotonic()
    proposal = CommandAgent(_script(tmp_path, body), timeout_s=3).propose(ctx)
    assert time.monotonic() - start < 30
    assert proposal.source is not None and proposal.source.endswith("TRAILER = 1\n")
    assert "timed out" in proposal.description
    child = int(pid_file.read_text())
    for _ in range(50):  # the child was killed with its group (allow the reaper a moment)
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_no_change_is_rejected_with_stderr(workspace, tmp_path):
    _, ctx = workspace
    body = "import sys\nprint('model quota exceeded', file=sys.stderr)\nsys.exit(3)\n"
    proposal = CommandAgent(_script(tmp_path, body), timeout_s=30).propose(ctx)
    assert proposal.source is None
    assert "did not change kernel.py" in proposal.rejected_reason
    assert "status 3" in proposal.rejected_reason and "model quota exceeded" in proposal.rejected_reason


def test_a_command_the_shell_cannot_run_ends_the_run(workspace, tmp_path):
    """Exit 127/126 with kernel.py untouched (a misspelt or missing agent CLI): AgentRefused,
    so the run stops with exit 2 instead of recording a rejected row every few milliseconds
    for the whole budget (304 rows and commits in a 20 s run before)."""
    from autokernel.agents.base import AgentRefused

    _, ctx = workspace
    with pytest.raises(AgentRefused, match=r"status 127.*no-such-agent-xyz"):
        CommandAgent("no-such-agent-xyz {prompt_file}", timeout_s=30).propose(ctx)
    script = tmp_path / "not_executable.sh"
    script.write_text("echo hi\n")
    with pytest.raises(AgentRefused, match="status 126"):
        CommandAgent(f"{script} {{prompt_file}}", timeout_s=30).propose(ctx)


def test_broken_file_is_rejected_and_deleted_file_restored(workspace, tmp_path):
    root, ctx = workspace
    body = "import pathlib\npathlib.Path('kernel.py').write_text('def kernel_fn(:\\n')\n"
    proposal = CommandAgent(_script(tmp_path, body), timeout_s=30).propose(ctx)
    assert proposal.source is None and "does not parse" in proposal.rejected_reason
    body = "import os\nos.remove('kernel.py')\n"
    proposal = CommandAgent(_script(tmp_path, body), timeout_s=30).propose(ctx)
    assert proposal.source is None and "no kernel.py" in proposal.rejected_reason
    assert git(root, "status", "--porcelain") == ""


def test_prompt_on_stdin_paths_with_spaces_and_scrubbed_logs(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    pdir = tmp_path / "dir with space" / "problems" / "rowsum"
    ctx = make_context(pdir, extra={"log_dir": str(tmp_path / "my logs")})
    # No {prompt_file}: the prompt comes on stdin. The program prints the key, as a
    # careless agent might.
    body = """
    import os, pathlib, sys
    text = sys.stdin.read()
    assert "kernel_fn" in text and os.environ["AUTOKERNEL_PROMPT_FILE"].endswith("prompt.md")
    print("key is", os.environ["OPENAI_API_KEY"])
    k = pathlib.Path("kernel.py")
    k.write_text(k.read_text().replace("BLOCK_N", "BLOCK_COLS"))
    """
    script = tmp_path / "stdin agent.py"
    script.write_text(textwrap.dedent(body))
    proposal = CommandAgent(f"{sys.executable} '{script}'", timeout_s=30).propose(ctx)
    assert proposal.source is not None and "BLOCK_COLS" in proposal.source
    assert FAKE_KEY not in proposal.description
    found = subprocess.run(["grep", "-rl", FAKE_KEY, str(tmp_path)], capture_output=True, text=True)
    assert found.stdout == ""
    assert "[redacted]" in (tmp_path / "my logs" / "command-0001.out").read_text()


def test_make_agent_needs_a_command():
    with pytest.raises(AgentConfigError, match="--agent-cmd"):
        make_agent(AgentConfig(name="command"))
    agent = make_agent(AgentConfig(name="command", agent_cmd="true {prompt_file}", agent_timeout_s=5))
    assert agent.name == "command" and agent.timeout_s == 5


# ------------------------------------------------------------------ end to end
ROGUE_IN_LOOP = """
import pathlib, subprocess, sys
prompt = pathlib.Path(sys.argv[1]).read_text()
assert "autokernel bench kernel.py --problem reduce" in prompt and "kernel_fn(x" in prompt
k = pathlib.Path("kernel.py")
k.write_text(k.read_text().replace('"BLOCK_N": 64', '"BLOCK_N": 512'))
pathlib.Path("../../results.tsv").write_text("forged\\n")
pathlib.Path("../../README.txt").write_text("the agent was here")
run = lambda *a: subprocess.run(["git", *a], check=True, capture_output=True)
run("add", "-A")
run("commit", "-q", "-m", "agent commit")
print("one chunk per row")
"""


def test_command_agent_through_the_loop(tmp_path, monkeypatch):
    """A real run on the reduce problem (CPU, interpreter): the agent's edit of kernel.py is
    evaluated and kept; its commit and its other edits are not."""
    from agent_e2e import FAST, git as git_out, start_file
    from autokernel.loop.optimize import Target, run_optimize
    from autokernel.loop.results import read_results

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for k, v in _GIT_ENV.items():  # lets the agent's own `git commit` work
        monkeypatch.setenv(k, v)
    work = tmp_path / "ws"
    config = AgentConfig(name="command", agent_cmd=_script(tmp_path, ROGUE_IN_LOOP), agent_timeout_s=120)
    run_optimize([Target("reduce", "reduce", start_file=start_file(tmp_path), dtype="fp32")], work, agent=config,
                 budget_s=None, max_experiments=1, device="cpu", show_progress=False)
    rows = read_results(work / "results.tsv")
    assert [(r.status, r.agent) for r in rows] == [("baseline", "command"), ("keep", "command")]
    assert rows[1].description == "one chunk per row"
    assert (work / "problems/reduce/kernel.py").read_text() == FAST
    assert "agent commit" not in git_out(work, "log", "--all", "--format=%s")
    assert "forged" not in (work / "results.tsv").read_text()
    assert not (work / "README.txt").exists()
    assert git_out(work, "status", "--porcelain") == ""
