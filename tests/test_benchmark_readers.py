"""The benchmark scripts that read a loop's results.tsv: the rows they read, with the file closed
after (they opened it and left it to the garbage collector)."""
from __future__ import annotations

import gc
import importlib.util
import json
import warnings
from pathlib import Path

from autokernel.loop.results import ExperimentRecord, append_result, ensure_results

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def script(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loop_workdir(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    results = root / "results.tsv"
    ensure_results(results)
    append_result(results, ExperimentRecord(0, "softmax", "tuner", "baseline", latency_us=10.0, wall_s=3.0))
    append_result(results, ExperimentRecord(1, "softmax", "tuner", "revert", latency_us=11.0, wall_s=5.0))
    append_result(results, ExperimentRecord(2, "softmax", "tuner", "keep", latency_us=9.0, wall_s=4.5))
    return results


def read_without_leaks(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = fn()
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
    return value


def test_loop_cost_table_reads_the_rows_and_closes_the_file(tmp_path):
    loop_workdir(tmp_path / "loop_softmax")
    rows = read_without_leaks(lambda: script("loop_cost_table").rows_of(tmp_path, "softmax"))
    assert [r["status"] for r in rows] == ["baseline", "revert", "keep"]
    summary = script("loop_cost_table").summary(rows)
    assert summary["n"] == 2 and summary["median"] == 4.75


def test_judge_replay_takes_each_evaluation_from_its_row_and_closes_the_file(tmp_path):
    results = loop_workdir(tmp_path)
    for number, evaluation_s in ((1, 3.5), (2, 4.0)):
        log = tmp_path / "logs" / "softmax" / "run"
        log.mkdir(parents=True, exist_ok=True)
        (log / f"exp_{number:04d}.json").write_text(json.dumps({"wall_s": evaluation_s}))
    agent = read_without_leaks(lambda: script("judge_replay").agent_seconds(results))
    assert agent == {1: 1.5, 2: 0.5}
