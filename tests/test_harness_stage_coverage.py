"""Which cases each stage runs (stages.py), with a stand-in judge: numerics and determinism at
every target shape x every dtype, edges at every dtype on a GPU too, edge and held-out shapes
called twice; and a difference between two calls fails as nondeterministic."""
from __future__ import annotations

import pytest
import torch

from autokernel.harness import compare, stages
from autokernel.problems import get_problem


class RecordingJudge:
    """Records every case run; outputs follow ``outputs(case, calls)``."""

    def __init__(self, problem, device: str, outputs=None):
        self.problem, self.device, self.gpu = problem, device, device.startswith("cuda")
        self.runs: list[tuple[str, str, str, int]] = []
        self.seed = 0
        self.numerics_variants: dict = {}  # as stages.Judge: what the numerics stage drew per shape
        self.outputs = outputs or (lambda case, calls: [(torch.ones(3),) for _ in range(calls)])

    def next_seed(self) -> int:
        self.seed += 1
        return self.seed

    def make_case(self, shape, dtype):
        return stages.Case(dict(shape), dtype, ())

    def run_case(self, case, calls=1, refs=None):
        self.runs.append((stages.format_shape(case.shape), stages.dtype_name(case.dtype), case.name, calls))
        return stages.CaseResult(self.outputs(case, calls), compare.Verdict(True, 0.0))

    def fail_if_wrong(self, result, case):
        pass

    def can_batch(self, cases):
        return False  # one request per case, so that every case is recorded


def plan_for(problem, device="cpu"):
    return stages.StagePlan(list(problem.shapes_for(device)), list(problem.dtypes), heldout_seed=7)


def fake_adversarial(shape, dtype, device, seed):
    return [("large", ()), ("tiny", ())]


def test_numerics_runs_at_every_shape_and_dtype():
    problem = get_problem("softmax")
    problem.adversarial_inputs = fake_adversarial
    judge = RecordingJudge(problem, "cuda:0")
    plan = plan_for(problem, "cuda:0")
    stages.stage_numerics(judge, plan, stages.StageTally("numerics"))
    ran = {(s, d) for s, d, _, _ in judge.runs}
    assert ran == {(stages.format_shape(s), stages.dtype_name(d)) for s in plan.shapes for d in plan.dtypes}
    assert len(judge.runs) == 2 * len(plan.shapes) * len(plan.dtypes)


def test_determinism_calls_every_shape_and_dtype_twice():
    problem = get_problem("rmsnorm")
    judge = RecordingJudge(problem, "cuda:0")
    plan = plan_for(problem, "cuda:0")
    stages.stage_determinism(judge, plan, stages.StageTally("determinism"))
    assert sorted(judge.runs) == sorted((stages.format_shape(s), stages.dtype_name(d), "", 2)
                                        for s in plan.shapes for d in plan.dtypes)


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_edges_run_every_dtype_twice_on_every_device(device):
    problem = get_problem("layernorm")
    problem.adversarial_inputs = None
    judge = RecordingJudge(problem, device)
    plan = plan_for(problem, device)
    stages.stage_edges(judge, plan, stages.StageTally("edges"))
    edges = problem.edge_shapes_for(device)
    assert sorted(judge.runs) == sorted((stages.format_shape(s), stages.dtype_name(d), "", 2)
                                        for s in edges for d in plan.dtypes)


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_edges_draw_the_adversarial_cases_at_every_edge_shape_and_dtype(device):
    """A path only the edge shapes take (a wide row's loop, an odd vocabulary's tail) must meet
    the overflow-prone values too (tests/attacks/softmax_wide_rows_no_max.py passed)."""
    problem = get_problem("layernorm")
    problem.adversarial_inputs = fake_adversarial
    judge = RecordingJudge(problem, device)
    plan = plan_for(problem, device)
    stages.stage_edges(judge, plan, stages.StageTally("edges"))
    edges = problem.edge_shapes_for(device)
    assert sorted(judge.runs) == sorted([(stages.format_shape(s), stages.dtype_name(d), name, 1)
                                         for s in edges for d in plan.dtypes for name in ("large", "tiny")]
                                        + [(stages.format_shape(s), stages.dtype_name(d), "", 2)
                                           for s in edges for d in plan.dtypes])
    assert judge.numerics_variants == {}  # the timed calls draw at the target shapes only


def test_heldout_shapes_run_every_dtype_twice_and_get_the_adversarial_cases():
    """Every dtype: a matmul exact at the target shapes in fp32 that fed a longer ragged K to the
    dot in bf16 passed when the held-out shapes ran at the first dtype alone."""
    problem = get_problem("softmax")
    problem.adversarial_inputs = fake_adversarial
    judge = RecordingJudge(problem, "cpu")
    stages.stage_heldout(judge, plan_for(problem), stages.StageTally("heldout"))
    regular = [run for run in judge.runs if run[2] == ""]
    assert len(regular) == len(problem.cpu_shapes) * len(problem.dtypes) and all(calls == 2 for *_, calls in regular)
    assert {dtype for _, dtype, _, _ in regular} == {stages.dtype_name(d) for d in problem.dtypes}
    drawn = sorted(run for run in judge.runs if run[2])
    assert drawn == sorted((shape, dtype, name, 1) for shape, dtype, _, _ in regular for name in ("large", "tiny"))


def test_two_calls_that_differ_fail_as_nondeterministic():
    problem = get_problem("reduce")
    last_bit = torch.tensor([1.0, 2.0, 3.0])

    def flaky(case, calls):
        return [(last_bit,), (torch.nextafter(last_bit, torch.tensor(9.0)),)][:calls]

    judge = RecordingJudge(problem, "cpu", outputs=flaky)
    with pytest.raises(stages.CaseFailure, match="nondeterministic: .* differ in 3 element"):
        stages.stage_edges(judge, plan_for(problem), stages.StageTally("edges"))


def test_inputs_rewritten_in_place_carry_the_scalars_they_were_drawn_for():
    """The cached-output check writes new values into the case's own tensors; the non-tensor
    arguments must come with the new values (cross_entropy targets drawn for ignore_index -1
    are out of range for a case whose ignore_index is -100)."""
    problem = get_problem("cross_entropy")
    shape = {"M": 16, "V": 50}
    old = problem.make_inputs(shape, torch.float32, "cpu", 0)
    new = problem.make_inputs(shape, torch.float32, "cpu", 1)
    assert old[2] != new[2]
    merged = stages.with_scalars_of(old, new)
    assert merged[0] is old[0] and merged[1] is old[1] and merged[2] == new[2]
    nested = stages.with_scalars_of((old[0], [old[1], 1e-6]), (new[0], [new[1], 1e-5]))
    assert nested[0] is old[0] and nested[1][0] is old[1] and nested[1][1] == 1e-5
