"""The ``command`` agent: an external coding agent CLI edits ``kernel.py`` in place.

``--agent-cmd "claude -p \"$(cat {prompt_file})\""`` or ``"codex exec - < {prompt_file}"``: the
prompt is written to a file in the agent log directory (never in the committed tree), the
command runs through the shell in the problem directory with ``{prompt_file}`` replaced by the
quoted path (without the placeholder, the prompt is fed on stdin), under a timeout that kills
its whole process group.  When it exits, ``kernel.py`` is read back as the proposal.

The tool owns git.  Before the command runs we record HEAD, the branch, every ref and the
untracked files; afterwards everything is put back — commits, branches, tags and stashes the
agent made are dropped, tracked files are reset, new untracked files outside the log
directory are deleted — and only the new contents of ``kernel.py`` are kept.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .base import AgentRefused, Context, Proposal
from .parse import MAX_DESCRIPTION, validate_source
from .prompt import build_command_prompt
from .redact import scrub, secret_values
from .workdirs import agent_log_dir

PLACEHOLDER = "{prompt_file}"
KILL_GRACE_S = 5.0
SHELL_CANNOT_RUN = {126: "a command found but not executable", 127: "a command not found"}


class GitSnapshotError(RuntimeError):
    pass


def _git(root: Path, *args: str, check: bool = True) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    proc = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise GitSnapshotError(f"git {' '.join(args)}: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


@dataclass
class GitSnapshot:
    """The state of a repository before an external agent ran in it."""

    root: Path
    head: str
    branch: str | None  # "refs/heads/..." or None when detached
    refs: dict[str, str]
    untracked: set[str]
    dirs: set[str]  # directories (relative) that existed
    dirty: dict[str, bytes | None] = field(default_factory=dict)  # tracked changes to keep

    @classmethod
    def take(cls, path: Path) -> "GitSnapshot | None":
        """None when ``path`` is not inside a git work tree with a commit."""
        proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True)
        if proc.returncode != 0:
            return None
        root = Path(proc.stdout.strip())
        head = _git(root, "rev-parse", "-q", "--verify", "HEAD", check=False).strip()
        if not head:
            return None
        branch = _git(root, "symbolic-ref", "-q", "HEAD", check=False).strip() or None
        dirty = {}
        for rel in _changed_tracked(root):
            p = root / rel
            dirty[rel] = p.read_bytes() if p.is_file() else None
        return cls(root, head, branch, _refs(root), _untracked(root), _dirs(root), dirty)

    def restore(self, keep: Path, keep_bytes: bytes | None, spare: list[Path]) -> list[str]:
        """Undo everything since the snapshot except ``keep``'s new contents.  Files under
        the ``spare`` directories are left alone.  Returns what was undone, for the log."""
        undone: list[str] = []
        branch_now = _git(self.root, "symbolic-ref", "-q", "HEAD", check=False).strip() or None
        head_now = _git(self.root, "rev-parse", "-q", "--verify", "HEAD", check=False).strip()
        # Refs first (branches, tags, stash), so that the original branch exists again at its
        # old commit; then get back onto it.
        refs_now = _refs(self.root)
        for ref, sha in refs_now.items():
            if ref not in self.refs:
                _git(self.root, "update-ref", "-d", ref)
                undone.append(f"deleted {ref}")
            elif self.refs[ref] != sha:
                _git(self.root, "update-ref", ref, self.refs[ref])
                undone.append(f"reset {ref}")
        for ref, sha in self.refs.items():
            if ref not in refs_now:
                _git(self.root, "update-ref", ref, sha)
                undone.append(f"restored {ref}")
        if branch_now != self.branch:
            if self.branch:
                _git(self.root, "symbolic-ref", "HEAD", self.branch)
            else:
                _git(self.root, "update-ref", "--no-deref", "HEAD", self.head)
            undone.append(f"switched back from {branch_now or 'a detached HEAD'}")
        if head_now != self.head:
            undone.append(f"dropped commits {head_now[:10]} -> {self.head[:10]}")
        changed = _changed_tracked(self.root)
        keep_rel = _rel(keep, self.root)
        others = [c for c in changed if c != keep_rel and c not in self.dirty]
        if others:
            undone.append("reverted " + ", ".join(sorted(others)[:20]))
        _git(self.root, "reset", "-q", "--hard", self.head)
        spare_rel = [s for s in (_rel(p, self.root) for p in spare) if s]
        for rel in sorted(_untracked(self.root) - self.untracked):
            if rel == keep_rel or any(rel == s or rel.startswith(s.rstrip("/") + "/") for s in spare_rel):
                continue
            path = self.root / rel
            if path.is_file() or path.is_symlink():
                path.unlink()
                undone.append(f"removed {rel}")
                _remove_new_empty_parents(path.parent, self.root, self.dirs)
        for rel, data in self.dirty.items():
            if rel == keep_rel:
                continue
            path = self.root / rel
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        if keep_bytes is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            keep.write_bytes(keep_bytes)
        return undone


def _refs(root: Path) -> dict[str, str]:
    out = _git(root, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def _untracked(root: Path) -> set[str]:
    out = _git(root, "ls-files", "--others", "--exclude-standard", "-z")
    return {p for p in out.split("\0") if p}


def _changed_tracked(root: Path) -> list[str]:
    out = _git(root, "diff", "HEAD", "--name-only", "-z", check=False)
    return [p for p in out.split("\0") if p]


def _rel(path: Path, root: Path) -> str | None:
    try:
        return Path(os.path.realpath(path)).relative_to(os.path.realpath(root)).as_posix()
    except ValueError:
        return None


def _dirs(root: Path) -> set[str]:
    found = set()
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        found.add(Path(dirpath).relative_to(root).as_posix())
    return found


def _remove_new_empty_parents(d: Path, root: Path, before: set[str]) -> None:
    """Remove directories the agent created that are empty now."""
    while d != root and d.relative_to(root).as_posix() not in before:
        try:
            d.rmdir()
        except OSError:
            return
        d = d.parent


@dataclass
class CommandResult:
    returncode: int | None  # None when killed by the timeout
    timed_out: bool
    seconds: float
    last_line: str


def run_command(cmd: str, cwd: Path, prompt_file: Path, log_dir: Path, stem: str,
                timeout_s: float, secrets: list[str]) -> CommandResult:
    """Run ``cmd`` through the shell in its own process group; stdout/stderr go to files in
    ``log_dir`` (scrubbed afterwards)."""
    if PLACEHOLDER in cmd:
        shell_cmd = cmd.replace(PLACEHOLDER, shlex.quote(str(prompt_file)))
        stdin = subprocess.DEVNULL
    else:
        shell_cmd = cmd
        stdin = open(prompt_file, "rb")
    out_path, err_path = log_dir / f"{stem}.out", log_dir / f"{stem}.err"
    env = {**os.environ, "AUTOKERNEL_PROMPT_FILE": str(prompt_file)}
    start = time.monotonic()
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(shell_cmd, shell=True, cwd=cwd, stdin=stdin, stdout=out, stderr=err,
                                    env=env, start_new_session=True)
        finally:
            if stdin is not subprocess.DEVNULL:
                stdin.close()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
    seconds = time.monotonic() - start
    for path in (out_path, err_path):
        text = path.read_text(errors="replace")
        cleaned = scrub(text, secrets)
        if cleaned != text:
            path.write_text(cleaned)
    lines = [ln.strip() for ln in out_path.read_text(errors="replace").splitlines() if ln.strip()]
    return CommandResult(None if timed_out else proc.returncode, timed_out, seconds, lines[-1] if lines else "")


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            # the leader is gone; make sure no member of the group survives it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def bench_spec(context: Context) -> str:
    """The ``--problem`` argument that works from the problem directory."""
    spec = context.problem_spec
    path = Path(spec)
    if path.suffix == ".py" or (path.exists() and not spec.isidentifier()):
        return shlex.quote(str(path.resolve()))
    return shlex.quote(spec)


class CommandAgent:
    name = "command"

    def __init__(self, cmd: str, timeout_s: float = 1800.0):
        self.cmd = cmd
        self.timeout_s = timeout_s

    def propose(self, context: Context) -> Proposal:
        secrets = secret_values()
        log_dir = agent_log_dir(context)
        stem = f"command-{context.experiment:04d}"
        prompt_file = log_dir / f"{stem}-prompt.md"
        prompt_file.write_text(scrub(build_command_prompt(context, bench_spec(context)), secrets), encoding="utf-8")
        kernel = context.kernel_path if context.kernel_path.is_absolute() else context.problem_dir / "kernel.py"
        before = kernel.read_bytes() if kernel.is_file() else None
        snapshot = GitSnapshot.take(context.problem_dir)

        result = run_command(self.cmd, context.problem_dir, prompt_file, log_dir, stem, self.timeout_s, secrets)

        after = kernel.read_bytes() if kernel.is_file() else None
        undone: list[str] = []
        if snapshot is not None:
            try:
                undone = snapshot.restore(kernel, after, spare=[log_dir])
            except GitSnapshotError as exc:
                undone = [f"restore failed: {exc}"]
        if undone:
            (log_dir / f"{stem}-undone.txt").write_text("\n".join(undone) + "\n")

        how = (f"timed out after {self.timeout_s:.0f}s" if result.timed_out
               else f"exited with status {result.returncode}")
        description = scrub(_description(result.last_line), secrets)
        if after is None:
            return Proposal(None, description, rejected_reason=f"the command left no kernel.py ({how})")
        if after == before and result.returncode in SHELL_CANNOT_RUN:
            # the shell found no such command (127) or could not execute it (126): every later
            # experiment would fail the same way in milliseconds, so the run stops (exit 2)
            raise AgentRefused(f"--agent-cmd could not run ({how}: {SHELL_CANNOT_RUN[result.returncode]})"
                               + _stderr_tail(log_dir / f"{stem}.err") + "; fix --agent-cmd")
        if after == before:
            return Proposal(None, description, rejected_reason=f"the command did not change kernel.py ({how})"
                            + _stderr_tail(log_dir / f"{stem}.err"))
        source = scrub(after.decode("utf-8", errors="replace"), secrets)
        error = validate_source(source, context.best_source)
        if error:
            return Proposal(None, description, rejected_reason=f"{error} ({how})")
        if result.timed_out:
            description = f"{description} (timed out)"
        return Proposal(source, description)


def _description(last_line: str) -> str:
    text = " ".join(last_line.split()).strip("`*# ")
    if not text:
        return "command agent edit"
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"


def _stderr_tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return f"; stderr: {' | '.join(lines[-3:])[:300]}" if lines else ""
