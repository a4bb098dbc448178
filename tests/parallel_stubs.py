"""Stand-ins for the parallel-loop tests: kernel files whose cost is written in them, a judge
that reads the cost instead of running the file (picklable, so it runs in lane processes and
Ray actors), a model endpoint script of such files, and a checker of workspace consistency."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from autokernel.agents.base import Proposal
from autokernel.loop.results import read_results
from cost_judge import EVAL_DELAY_ENV, CostEvaluator, cost_of, kernel  # noqa: F401 (re-exported)


def costs(n: int) -> list[int]:
    """A fixed, unordered sequence of candidate costs around the start kernel's 100."""
    return [60 + (i * 37) % 45 for i in range(1, n + 1)]


def file_reply_text(cost: float) -> str:
    return f"DESCRIPTION: cost {cost}\n\n```python\n{kernel(cost)}```\n"


class ListAgent:
    """Proposes ``sources[n - 1]`` for experiment n (the number the loop tells it), several at
    once (like a model), each after ``delay_s``."""

    name = "scripted"
    concurrent_proposals = True

    def __init__(self, sources: list[str], delay_s: float = 0.0):
        self.sources = list(sources)
        self.delay_s = delay_s
        self.contexts = []

    def propose(self, context):
        self.contexts.append(context)
        time.sleep(self.delay_s)
        n = context.experiment
        source = self.sources[n - 1] if n <= len(self.sources) else kernel(99.5, f" {n}")
        return Proposal(source=source, description=f"cost {cost_of(source)}" if "COST" in source else "?")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def check_workspace(work: Path, name: str, start_cost: float = 100.0) -> list:
    """Assert what must hold after any run, interrupted or not; returns the rows.

    Rows numbered 0..n without gaps, each committed exactly once (one commit per keep, whose
    kernel is that candidate), a clean tree, and exact keep/revert: every keep beat the
    incumbent current when it was recorded, and no correct revert did."""
    rows = read_results(work / "results.tsv", name)
    assert [r.experiment for r in rows] == list(range(len(rows)))
    assert git(work, "status", "--porcelain") == ""
    assert git(work, "show", "HEAD:results.tsv") == (work / "results.tsv").read_text()
    subjects = git(work, "log", "--format=%s").splitlines()
    for r in rows:
        assert sum(1 for s in subjects if s.startswith(f"exp {r.experiment} {name}:")) == 1, r
    keep_subjects = git(work, "log", "--format=%s", "--", f"problems/{name}/kernel.py").splitlines()
    keeps = [r for r in rows if r.status == "keep"]
    assert len(keep_subjects) == len(keeps) + 1  # + the setup commit
    best = start_cost
    for r in rows[1:]:
        if r.status == "keep":
            assert r.latency_us < best * 0.98, (r, best)
            best = r.latency_us
        elif r.status == "revert":
            assert r.latency_us >= best * 0.98, (r, best)
    current = cost_of((work / f"problems/{name}/kernel.py").read_text())
    assert current == best
    return rows
