"""Compile ahead (harness/compile_ahead.py): helper workers call a new kernel file at the shapes
the later stages reach, so that Triton compiles them side by side.  On the CPU nothing compiles
(the interpreter); these tests check the plumbing: which cases, in which order, that helpers
never touch a verdict, and that none outlives the stages."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

from autokernel.harness import Evaluator, compile_ahead
from autokernel.harness.stages import StagePlan
from autokernel.harness.worker import Worker
from autokernel.problems.registry import KERNELS_DIR, get_problem

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")


def test_the_cases_run_from_the_last_stage_back_each_once():
    problem = get_problem("rmsnorm")
    shapes = [dict(s) for s in problem.cpu_shapes]
    dtypes = [torch.float32, torch.bfloat16]
    cases = compile_ahead.cases_ahead(problem, StagePlan(shapes, dtypes, heldout_seed=7), device="cpu")
    rng = random.Random(7)  # as stages.stage_heldout draws them
    heldout = [problem.heldout_shape(dict(s), rng) for s in shapes]
    edges = [dict(s) for s in problem.edge_shapes_for("cpu")]
    assert cases[0] == (heldout[-1], torch.bfloat16)  # the stages' last call comes first
    assert cases[-1] == (shapes[0], torch.float32)  # their first, last
    keys = [(tuple(s.items()), d) for s, d in cases]
    assert len(keys) == len(set(keys))
    assert set(keys) == {(tuple(s.items()), d) for d in dtypes for s in shapes + edges + heldout}
    halves = compile_ahead.split(cases, 2)
    assert halves[0][0] == cases[0] and halves[1][0] == cases[1] and sum(map(len, halves)) == len(cases)


def test_helpers_load_the_file_and_call_it_once_per_case():
    problem = get_problem("reduce")
    cases = [({"M": 3, "N": 37}, torch.float32), ({"M": 1, "N": 1}, torch.float32), ({"M": 2, "N": 64}, torch.float16)]
    path = KERNELS_DIR / "reduce.py"
    load = {"op": "load", "slot": "candidate", "path": str(path), "source": path.read_text(), "problem": "reduce",
            "native_code": False, "writable": ()}
    ahead = compile_ahead.start(lambda: Worker("cpu"), load, cases, helpers=2, seed=11)
    for thread in ahead.threads:
        thread.join(timeout=120)
    assert problem.kind == "reduce" and ahead.calls == [2, 1]
    assert not any(w.alive for w in ahead.workers)  # each helper kills its worker when done


def test_helpers_change_no_verdict_and_are_gone_before_the_timed_calls(monkeypatch):
    starts = []
    real_start = compile_ahead.start

    def recording_start(*args, **kwargs):
        starts.append(real_start(*args, **kwargs))
        return starts[-1]

    monkeypatch.setattr(compile_ahead, "start", recording_start)
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=60, baselines=False,
                   compile_ahead=2) as ev:
        result = ev.evaluate(KERNELS_DIR / "reduce.py")
    assert result.verdict == "pass", result.message
    assert len(starts) == 1 and starts[0].stopping.is_set()
    assert not any(w.alive for w in starts[0].workers) and not any(t.is_alive() for t in starts[0].threads)


KB_FILE = Path(__file__).resolve().parents[2] / "shared" / "kernelbench" / "level1" / "19_ReLU.py"


def test_no_helpers_by_default_on_the_cpu_nor_where_files_build_native_code(monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_COMPILE_AHEAD", "3")
    with Evaluator("reduce", device="cpu", timing=False, baselines=False) as ev:
        assert ev.compile_ahead == 0  # the environment asks for GPU evaluations only
    if not KB_FILE.is_file():
        pytest.skip(f"no KernelBench files at {KB_FILE.parent}")
    from autokernel.problems.kernelbench import KernelBenchOptions, load_kernelbench

    for allow_torch, helpers in ((False, 2), (True, 0)):  # --allow-torch: native builds share one build folder
        problem = load_kernelbench(KB_FILE, KernelBenchOptions(scale=0.005, allow_torch=allow_torch))
        with Evaluator(problem, device="cpu", timing=False, baselines=False, compile_ahead=2) as ev:
            assert ev.compile_ahead == helpers


def test_only_the_helpers_that_fit_beside_the_memory_plan_start():
    from autokernel.harness.memory import GIB, MemoryPlan, SetSizes

    def plan(budget, need):
        return MemoryPlan(budget=budget, sizes=SetSizes(inputs=GIB // 2, outputs=GIB // 2, reference=GIB),
                          exact_snapshots=True, together=True, need=need, fits=True)

    assert compile_ahead.helpers_that_fit(3, plan(100 * GIB, 10 * GIB)) == 3
    assert compile_ahead.helpers_that_fit(3, plan(100 * GIB, 95 * GIB)) == 2  # 2 GiB each, 5 GiB left
    assert compile_ahead.helpers_that_fit(3, plan(100 * GIB, 99 * GIB)) == 0
    assert compile_ahead.helpers_that_fit(0, plan(100 * GIB, 0)) == 0
    assert compile_ahead.helpers_that_fit(2, None) == 0
