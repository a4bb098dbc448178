"""The workspace: a git repository that holds the whole state of an optimization run.

Layout of ``--workdir DIR`` (branch ``autokernel/<run-name>``)::

    problems/<name>/kernel.py     the best kernel so far (always at this path on the branch head)
    problems/<name>/problem.json  spec, shapes, weights, dtype, fraction (see ``ProblemFile``)
    results.tsv                   one row per experiment (loop/results.py), committed
    plan.json                     the plan the run follows, when given
    logs/<run-name>/<name>/       evaluation JSON, candidate files, agent logs (git-ignored)
    run.json, verify.json, report.md, progress.png, roofline.png, export/   (git-ignored)
    .autokernel.lock              pid of the process working here (git-ignored)

Git is driven through its command line.  Commits are authored by ``autokernel`` through the
environment, so they work on a machine with no git identity and never change the identity of
a repository that belongs to someone else.  A repository of something else is refused before
anything is written, unless the caller allows it explicitly (``allow_existing_repo``, the
``--use-existing-repo`` flag): then it must have no uncommitted changes and the run gets its
own branch.

Recovery (``Workspace.recover``) makes the tree consistent after a ``kill -9`` at any moment:
stale git lock files are removed, a partial trailing results row is dropped, complete rows
that were not committed yet are committed (a ``keep`` row together with its kernel, taken from
the candidate file in the logs), and every other change under ``problems/`` is reset to HEAD.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..files import replace_file_atomic, write_text_atomic
from .results import (ExperimentRecord, append_result, ensure_results, parse_results, read_results, repair_results,
                      timed_out)

WORKSPACE_SUBJECT = "autokernel: workspace"
IGNORED = ("logs/", ".autokernel.lock", "__pycache__/", "*.pyc", "*.tmp",
           # written by run / verify / report / export: regenerated from the committed state
           "run.json", "verify.json", "report.md", "progress.png", "roofline.png", "export/")
LOCK_NAME = ".autokernel.lock"
_GIT_ENV = {"GIT_AUTHOR_NAME": "autokernel", "GIT_AUTHOR_EMAIL": "autokernel@localhost",
            "GIT_COMMITTER_NAME": "autokernel", "GIT_COMMITTER_EMAIL": "autokernel@localhost",
            "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}


class WorkspaceError(ValueError):
    """The workdir cannot be used (user mistake, exit code 2)."""


class GitError(RuntimeError):
    pass


def git(root: Path, *args: str, check: bool = True) -> str:
    env = {**os.environ, **_GIT_ENV}
    proc = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args],
                          cwd=root, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def sanitize_run_name(text: str) -> str:
    """A branch-safe run name: letters, digits, ``.``, ``_``, ``-`` and ``+``."""
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.")
    name = re.sub(r"\.{2,}", ".", name)
    if name.endswith(".lock"):
        name = name[: -len(".lock")]
    return name[:80] or "run"


def branch_name(run_name: str) -> str:
    return f"autokernel/{sanitize_run_name(run_name)}"


# --------------------------------------------------------------------------- checks
def _is_repo(root: Path) -> bool:
    return (root / ".git").exists()


def _has_commits(root: Path) -> bool:
    return bool(git(root, "rev-parse", "-q", "--verify", "HEAD", check=False).strip())


def _current_branch(root: Path) -> str:
    return git(root, "symbolic-ref", "-q", "--short", "HEAD", check=False).strip()


def _is_ours(root: Path) -> bool:
    """An autokernel workspace: on an ``autokernel/`` branch or grown from our workspace commit."""
    if _current_branch(root).startswith("autokernel/"):
        return True
    if not _has_commits(root):
        return False
    return bool(git(root, "rev-list", "-n", "1", "--grep", f"^{WORKSPACE_SUBJECT}$", "HEAD", check=False).strip())


def _tracked_changes(root: Path) -> list[str]:
    return [line for line in git(root, "status", "--porcelain", "--untracked-files=no").splitlines() if line.strip()]


def inspect_workdir(root: Path, allow_existing_repo: bool = False) -> None:
    """Refuse, without writing anything, a workdir that cannot be used: one another live process
    works in (its lock), and a git repository that is not an autokernel workspace unless
    ``allow_existing_repo``."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise WorkspaceError(f"--workdir {root} exists and is not a directory")
    owner = WorkspaceLock(root / LOCK_NAME).owner() if root.exists() else None
    if owner is not None and owner != os.getpid() and _pid_alive(owner):
        raise WorkspaceError(f"workdir {root} is in use by process {owner} "
                             f"(remove {LOCK_NAME} if that is wrong)")
    if not root.exists() or not _is_repo(root):
        return
    if (root / ".git").is_file():
        raise WorkspaceError(f"--workdir {root} is a git worktree or submodule; use a plain directory")
    try:
        ours = _is_ours(root)
        changes = _tracked_changes(root)
    except GitError as exc:
        raise WorkspaceError(f"--workdir {root} is a git repository that git cannot read: {exc}") from None
    if not ours and not allow_existing_repo:
        raise WorkspaceError(f"--workdir {root} is a git repository that is not an autokernel workspace; "
                             f"autokernel would add a branch, commits and files to it: use another directory, "
                             f"or pass --use-existing-repo to work on a branch of this repository")
    if not ours and changes:
        raise WorkspaceError(f"--workdir {root} is a git repository of something else with uncommitted "
                             f"changes ({len(changes)} file(s)); commit or stash them, or use another directory")


# --------------------------------------------------------------------------- lock
def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkspaceLock:
    """``.autokernel.lock`` holding the pid of the process working in the directory.  A lock
    left by a dead process is taken over."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.held = False

    def owner(self) -> int | None:
        try:
            return int(self.path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def acquire(self) -> None:
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                pid = self.owner()
                if pid is not None and pid != os.getpid() and _pid_alive(pid):
                    raise WorkspaceError(f"workdir {self.path.parent} is in use by process {pid} "
                                         f"(remove {self.path.name} if that is wrong)") from None
                self.path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{os.getpid()}\n")
                fh.flush()
                os.fsync(fh.fileno())
            self.held = True
            return
        raise WorkspaceError(f"could not take the lock {self.path}")

    def release(self) -> None:
        if self.held and self.owner() == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False


# --------------------------------------------------------------------------- records
@dataclass
class ProblemFile:
    """``problems/<name>/problem.json``."""

    name: str
    spec: str
    kind: str
    shapes: list[dict[str, int]] | None = None
    weights: list[float] | None = None
    dtype: str | None = None
    fraction: float | None = None
    start_file: str | None = None
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "ProblemFile":
        return cls(**json.loads(text))


def keep_message(record: ExperimentRecord) -> str:
    speed = f" ({record.speedup_vs_start:.3g}x vs start)" if record.speedup_vs_start else ""
    return f"exp {record.experiment} {record.problem}: {record.description}{speed}"


def record_message(record: ExperimentRecord) -> str:
    if record.status == "baseline":
        verdict = "correct" if record.correct else "timed out" if timed_out(record) else "not correct"
        return f"exp 0 {record.problem}: baseline ({verdict})"
    return f"exp {record.experiment} {record.problem}: {record.status}: {record.description}"


# --------------------------------------------------------------------------- workspace
class Workspace:
    """An opened, locked workspace on its run branch.  Use ``open_workspace``."""

    def __init__(self, root: Path, run_name: str):
        self.root = Path(root).resolve()
        self.run_name = sanitize_run_name(run_name)
        self.branch = branch_name(self.run_name)
        self.lock = WorkspaceLock(self.root / LOCK_NAME)
        self.recovered: list[str] = []  # what recovery did when the workspace was opened

    # ---------------------------------------------------------------- paths
    @property
    def results_path(self) -> Path:
        return self.root / "results.tsv"

    @property
    def plan_path(self) -> Path:
        return self.root / "plan.json"

    def problem_dir(self, name: str) -> Path:
        return self.root / "problems" / name

    def kernel_path(self, name: str) -> Path:
        return self.problem_dir(name) / "kernel.py"

    def problem_file(self, name: str) -> Path:
        return self.problem_dir(name) / "problem.json"

    def log_dir(self, name: str) -> Path:
        path = self.root / "logs" / self.run_name / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def candidate_path(self, name: str, experiment: int) -> Path:
        return self.log_dir(name) / f"exp_{experiment:04d}.py"

    def rel(self, path: Path) -> str:
        return str(Path(path).resolve().relative_to(self.root))

    # ---------------------------------------------------------------- results and evaluations
    def results(self, problem: str | None = None) -> list[ExperimentRecord]:
        """The rows of ``results.tsv`` (optionally of one problem), oldest first."""
        return read_results(self.results_path, problem)

    def ensure_results(self) -> None:
        """``results.tsv`` exists with its header and is committed."""
        ensure_results(self.results_path)
        if self.committed_text(self.results_path) is None:
            self.commit([self.results_path], "results.tsv")

    def record(self, record: ExperimentRecord, candidate: Path | None = None) -> str:
        """Append ``record`` and commit it: with ``candidate`` as the problem's kernel.py for a
        keep, results.tsv alone otherwise.  A kill between the append and the commit is
        repaired by ``recover`` (the candidate must already sit at ``candidate_path``).  Returns
        the new head commit."""
        kernel = self.kernel_path(record.problem)
        if record.status == "keep" and candidate is not None:
            replace_file_atomic(candidate, kernel)
            append_result(self.results_path, record)
            return self.commit([self.results_path, kernel], keep_message(record))
        append_result(self.results_path, record)
        return self.commit([self.results_path], record_message(record))

    def evaluation_path(self, name: str, experiment: int) -> Path:
        return self.log_dir(name) / f"exp_{experiment:04d}.json"

    def save_evaluation(self, name: str, experiment: int, evaluation) -> None:
        if evaluation is None:
            return
        try:
            text = evaluation.to_json()
        except Exception:
            return
        write_text_atomic(self.evaluation_path(name, experiment), text)

    def load_evaluation(self, name: str, experiment: int):
        from ..harness.records import Evaluation

        try:
            return Evaluation.from_json(self.evaluation_path(name, experiment).read_text())
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def restore_problem_dir(self, name: str) -> None:
        """Undo whatever an agent changed under problems/<name> (command agents edit in place)."""
        rel = self.rel(self.problem_dir(name))
        if self.git("status", "--porcelain", "--", rel).strip():
            self.git("checkout", "-q", "HEAD", "--", rel, check=False)
            self.git("clean", "-fdq", "--", rel)

    # ---------------------------------------------------------------- git
    def git(self, *args: str, check: bool = True) -> str:
        return git(self.root, *args, check=check)

    def head(self, short: bool = True) -> str:
        return self.git("rev-parse", *(["--short"] if short else []), "HEAD", check=False).strip()

    def commit(self, paths: list[Path], message: str) -> str:
        """Commit ``paths`` (only those) with ``message``; returns the short hash.  Nothing
        to commit is not an error."""
        rels = [self.rel(p) for p in paths]
        self.git("add", "--", *rels)
        if not self.git("diff", "--cached", "--name-only", "--", *rels).strip():
            return self.head()
        self.git("commit", "-q", "-m", message, "--", *rels)
        return self.head()

    def committed_text(self, path: Path) -> str | None:
        out = subprocess.run(["git", "show", f"HEAD:{self.rel(path)}"], cwd=self.root,
                             capture_output=True, text=True)
        return out.stdout if out.returncode == 0 else None

    def is_clean(self) -> bool:
        return not self.git("status", "--porcelain").strip()

    # ---------------------------------------------------------------- setup
    def _init_repo(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if not _is_repo(self.root):
            git(self.root, "init", "-q")
            git(self.root, "config", "user.name", "autokernel")
            git(self.root, "config", "user.email", "autokernel@localhost")
            git(self.root, "symbolic-ref", "HEAD", f"refs/heads/{self.branch}")

    def _remove_stale_git_locks(self) -> None:
        gitdir = self.root / ".git"
        for lock in [gitdir / "index.lock", gitdir / "HEAD.lock", *gitdir.glob("refs/heads/**/*.lock")]:
            if lock.exists():
                lock.unlink()

    def _checkout_branch(self) -> None:
        if not _has_commits(self.root):
            self.git("symbolic-ref", "HEAD", f"refs/heads/{self.branch}")
        elif _current_branch(self.root) != self.branch:
            if self.git("rev-parse", "-q", "--verify", f"refs/heads/{self.branch}", check=False).strip():
                self.git("checkout", "-q", self.branch)
            else:
                found = self.git("rev-list", "--grep", f"^{WORKSPACE_SUBJECT}$", "HEAD", check=False).split()
                base = found[-1] if found else "HEAD"
                self.git("checkout", "-q", "-b", self.branch, base)
        gitignore = self.root / ".gitignore"
        lines = gitignore.read_text().splitlines() if gitignore.exists() else []
        missing = [p for p in IGNORED if p not in lines]
        if missing or not _has_commits(self.root):
            if missing:
                gitignore.write_text("\n".join([*lines, *missing]) + "\n")
            self.git("add", "--", ".gitignore")
            self.git("commit", "-q", "--allow-empty", "-m", WORKSPACE_SUBJECT)

    def recover(self) -> list[str]:
        """Make the tree consistent after an abrupt stop; returns what was done (for the log)."""
        notes: list[str] = []
        if not _has_commits(self.root):
            return notes
        self._remove_stale_git_locks()
        if repair_results(self.results_path):
            notes.append("dropped a partial results row")
        committed = self.committed_text(self.results_path)
        if committed is not None and self.results_path.exists():
            done = {(r.problem, r.experiment) for r in parse_results(committed)}
            pending = [r for r in read_results(self.results_path) if (r.problem, r.experiment) not in done]
            kernels = []
            branch = _current_branch(self.root)
            log_run = branch[len("autokernel/"):] if branch.startswith("autokernel/") else self.run_name
            for record in pending:
                kernel = self.kernel_path(record.problem)
                candidate = self.root / "logs" / log_run / record.problem / f"exp_{record.experiment:04d}.py"
                if record.status == "keep" and candidate.exists() and kernel.parent.exists():
                    replace_file_atomic(candidate, kernel)
                    kernels.append(kernel)
            if pending:
                message = (keep_message(pending[0]) if pending[0].status == "keep" else record_message(pending[0])) \
                    if len(pending) == 1 else f"recover: {len(pending)} results rows"
                self.commit([self.results_path, *kernels], message)
                notes.append(f"committed {len(pending)} results row(s) written before the stop")
        elif committed is None and self.results_path.exists():
            self.results_path.unlink()
        problems = self.root / "problems"
        if problems.exists():
            dirty = self.git("status", "--porcelain", "--", "problems").strip()
            if dirty:
                self.git("checkout", "-q", "HEAD", "--", "problems", check=False)
                self.git("clean", "-fdq", "--", "problems")
                notes.append("reset uncommitted changes under problems/")
        if self.git("status", "--porcelain", "--", "results.tsv", "plan.json").strip():
            self.git("checkout", "-q", "HEAD", "--", "results.tsv", check=False)
            if self.committed_text(self.plan_path) is None:
                self.plan_path.unlink(missing_ok=True)
            else:
                self.git("checkout", "-q", "HEAD", "--", "plan.json")
        return notes

    def close(self) -> None:
        self.lock.release()


def current_run_name(root: Path) -> str | None:
    """The run name of the branch a workspace is on (``autokernel/<run-name>``), else None."""
    root = Path(root)
    if not root.is_dir() or not _is_repo(root):
        return None
    branch = _current_branch(root)
    return branch[len("autokernel/"):] if branch.startswith("autokernel/") else None


def run_names(root: Path) -> list[str]:
    """The runs a workdir holds: one ``autokernel/<run-name>`` branch each."""
    root = Path(root)
    if not root.is_dir() or not _is_repo(root):
        return []
    refs = git(root, "for-each-ref", "--format=%(refname)", "refs/heads/autokernel/", check=False).split()
    return sorted(ref[len("refs/heads/autokernel/"):] for ref in refs)


def run_problems(root: Path, run_name: str) -> list[str]:
    """The problems whose kernels the run's branch holds (``problems/<name>/kernel.py``)."""
    listed = git(Path(root), "ls-tree", "--name-only", f"refs/heads/{branch_name(run_name)}:problems/", check=False)
    return [name for name in listed.split() if has_committed_kernel(root, run_name, name)]


def switch_run(root: Path, run_name: str) -> None:
    """Check out the run ``run_name`` of the workdir at ``root`` (its branch must exist), as a run
    that resumes would: refused while another process works there."""
    known = run_names(root)
    if run_name not in known:
        raise WorkspaceError(f"{root} holds no run named {run_name!r}"
                             + (f": its runs are {', '.join(known)}" if known else ": it holds no runs"))
    open_workspace(Path(root), run_name, allow_existing_repo=True).close()


def has_committed_kernel(root: Path, run_name: str, name: str) -> bool:
    """Whether the run branch of the workspace at ``root`` already holds ``problems/<name>/kernel.py``."""
    root = Path(root)
    if not root.is_dir() or not _is_repo(root):
        return False
    ref = f"refs/heads/{branch_name(run_name)}:problems/{name}/kernel.py"
    return subprocess.run(["git", "cat-file", "-e", ref], cwd=root, capture_output=True).returncode == 0


def open_workspace(root: Path, run_name: str, allow_existing_repo: bool = False) -> Workspace:
    """Check, create, lock, recover and check out the run branch.  Raises WorkspaceError
    (before writing anything) when the workdir cannot be used."""
    inspect_workdir(Path(root), allow_existing_repo)
    ws = Workspace(root, run_name)
    ws._init_repo()
    ws.lock.acquire()
    try:
        notes = ws.recover() if _current_branch(ws.root).startswith("autokernel/") else []
        ws._checkout_branch()
        notes += ws.recover()  # the run branch may hold state from an earlier interrupted run
        ws.recovered = notes
    except BaseException:
        ws.lock.release()
        raise
    return ws


