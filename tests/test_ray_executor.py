"""The loop's evaluations on Ray actors: a small local Ray instance on CPU (the ``dist`` extra)."""
from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="Ray is the dist extra (pip install 'autokernel[dist]')")

from autokernel.loop.optimize import Target, run_optimize  # noqa: E402
from parallel_stubs import EVAL_DELAY_ENV, CostEvaluator, ListAgent, check_workspace, kernel  # noqa: E402


def test_evaluations_run_on_ray_actors_and_a_dead_actor_costs_one_experiment(tmp_path, monkeypatch):
    import os
    from pathlib import Path

    monkeypatch.setenv(EVAL_DELAY_ENV, "0.05")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    # the Ray workers unpickle the stand-in judge: they need this directory on their path
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in [here, os.environ.get("PYTHONPATH", "")] if p))
    start = tmp_path / "start.py"
    start.write_text(kernel(100))
    agent = ListAgent([kernel(90), kernel(95, " DIE"), kernel(80), kernel(85)])
    summary = run_optimize([Target("reduce", "reduce", start_file=start)], tmp_path / "ws", agent=agent,
                           budget_s=None, max_experiments=4, device="cpu", parallel=2, ray="local",
                           show_progress=False, _evaluator_factory=CostEvaluator)
    assert not ray.is_initialized()  # the local instance it started is shut down
    assert summary.stopped_reason == "max-experiments" and summary.experiments_run == 4
    assert summary.lanes == ["ray0", "ray1"]
    rows = check_workspace(tmp_path / "ws", "reduce")
    assert [r.status for r in rows] == ["baseline", "keep", "crash", "keep", "revert"]
    message = (tmp_path / "ws/logs/reduce/reduce/exp_0002.json").read_text()
    assert "Ray worker of ray" in message and "died" in message
