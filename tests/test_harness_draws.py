"""Timed calls draw their inputs in the worker, each set right before its own call, and what a
kernel could leave behind to run outside its calls is caught (issue 9).

A request's input sets made together (in the parent and shared, or in the worker) all lie in
memory the kernel can reach while its first call runs: by pointer arithmetic on a GPU, by the
worker's objects on any device.  A kernel could then compute a later call's output in an
earlier call, and the per-call median would count the work once for several calls.  The
tests below bypass the static checks (they would reject the spies' imports first) so that the
run-time behaviour itself is what is tested."""
from __future__ import annotations

import os
import sys

import pytest

from autokernel.harness import Evaluator, integrity, stages, timing
from autokernel.problems.registry import KERNELS_DIR

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

STARTER = (KERNELS_DIR / "reduce.py").read_text()

COUNTING_SPY = '''
import gc as _gc
import torch as _torch

def _others_alive(x):
    mine = x.untyped_storage().data_ptr()
    return sum(1 for o in _gc.get_objects() if type(o) is _torch.Tensor and o.shape == x.shape
               and o.dtype == x.dtype and o.untyped_storage().data_ptr() != mine)

_inner = kernel_fn

def kernel_fn(x):
    with open({log!r}, "a") as f:
        f.write(f"{{_others_alive(x)}}\\n")
    return _inner(x)
'''


@pytest.fixture
def no_static_checks(monkeypatch):
    monkeypatch.setattr(integrity, "static_findings", lambda source, name="kernel.py": [])


def evaluate(tmp_path, source: str, timed: bool = True):
    path = tmp_path / "kernel.py"
    path.write_text(source)
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=60, timing=timed,
                   baselines=False, prestart=False, writable=[tmp_path]) as ev:  # the spy's log
        return ev.evaluate(path)


def test_no_timed_call_can_see_the_inputs_of_a_later_call(tmp_path, monkeypatch, no_static_checks):
    monkeypatch.setattr(timing, "CPU_PLAN", timing.TimingPlan(budget_s=60.0, min_calls=4, max_calls=4))
    # plain draws only: a numerics draw makes every variant of its case to keep one, and the
    # others (of the same call's seed) may linger until the garbage collector runs
    monkeypatch.setattr(sys.modules["autokernel.harness.evaluate"], "NUMERICS_PER_SHAPE", 0)
    monkeypatch.setattr(stages, "LATE_REWRITE_GOES_ON", 0.0)  # the last calls' runs, the fewest rewrites
    monkeypatch.setattr(stages, "come_back_gap", lambda device: 1)  # and one other case before the last
    monkeypatch.setattr(stages, "come_back_rounds", lambda gap, device: 1)  # once
    log = tmp_path / "alive.log"
    result = evaluate(tmp_path, STARTER + COUNTING_SPY.format(log=str(log)))
    assert result.verdict == "pass", result.message
    counts = [int(line) for line in log.read_text().split()]
    # the four timed calls, in order, then the evaluation's last calls (a fresh case and its
    # fewest rewrites, another fresh case and one more rewrite, one shape and dtype: ``stages.late_rewrites``)
    last = 3 + stages.LATE_REWRITES
    timed = counts[-4 - last:-last]
    # call i sees the i sets drawn before it (kept until the parent has picked its checks), never a later one
    assert timed == [0, 1, 2, 3], counts


def test_a_kernel_that_rebinds_the_problems_draw_is_caught(tmp_path, no_static_checks):
    source = STARTER + '''
import sys as _sys
import torch as _torch
_problem = _sys.modules["autokernel.problems.reduce"]
_draw = _problem.make_inputs
_problem.make_inputs = lambda shape, dtype, device, seed: _draw(shape, dtype, device, 1)  # the same set every call
'''
    result = evaluate(tmp_path, source)
    assert result.verdict == "rejected", result.message
    assert {f.rule for f in result.integrity} == {"monkey-patch"}
    assert "make_inputs" in result.message


@pytest.mark.parametrize("left_behind, named", [
    # under the judge's watch, which stays on top of the stack (so the watch itself sees nothing amiss)
    ("_w = _pdm._pop_mode(); _pdm._push_mode(_Spy()); _pdm._push_mode(_w)", "a dispatch mode"),
    ("_sys.setprofile(lambda *a: None)", "a profile function"),
    ("_gc.callbacks.append(lambda *a: None)", "a garbage collector callback"),
])
def test_code_left_to_run_outside_the_call_is_caught(tmp_path, no_static_checks, left_behind, named):
    source = STARTER + f'''
import gc as _gc
import sys as _sys
import torch as _torch
import torch.utils._python_dispatch as _pdm
from torch.utils._python_dispatch import TorchDispatchMode as _Mode

class _Spy(_Mode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {{}}))

_inner = kernel_fn
_done = []

def kernel_fn(x):
    out = _inner(x)
    if not _done:
        _done.append(1)
        {left_behind}
    return out
'''
    result = evaluate(tmp_path, source, timed=False)
    assert result.verdict == "rejected", result.message
    assert "monkey-patch" in {f.rule for f in result.integrity}
    assert named in result.message


def test_timed_calls_seeds_are_drawn_each_on_its_own(monkeypatch):
    """The worker draws each timed call's inputs from a seed of the parent's: consecutive seeds
    (as the correctness stages use) would make every later call's inputs known to a kernel that
    recovered one seed from its input values, so that one call could compute the request's
    outputs and the others copy them (the median then timing a copy)."""
    from autokernel.harness import stages

    sent = []
    original = stages.Judge.call_message

    def spy(self, *args, **kwargs):
        if kwargs.get("draw"):  # a seed, or [seed, variant] for a numerics case
            sent.append([d if isinstance(d, int) else d[0] for d in kwargs["draw"]])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(stages.Judge, "call_message", spy)
    monkeypatch.setattr(timing, "CPU_PLAN", timing.TimingPlan(budget_s=60.0, min_calls=6, max_calls=6))
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=60, baselines=False,
                   prestart=False) as ev:
        assert ev.evaluate(KERNELS_DIR / "reduce.py").verdict == "pass"
    steps = {b - a for seeds in sent for a, b in zip(seeds, seeds[1:])}
    assert sent and max(len(s) for s in sent) >= 6 and len(steps) > 1 and 1 not in steps, sent


def _same_bits(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("kind", sorted(__import__("autokernel.problems.registry", fromlist=["x"]).BUILTIN_KINDS))
def test_a_timed_numerics_draw_is_the_very_case_the_whole_list_holds(kind):
    """A timed call's numerics draw builds only the variant it uses (base.only_variant): for every
    problem, every case and two dtypes, the same tensors as the numerics list built whole."""
    import torch

    from autokernel.harness.problem_spec import draw_set
    from autokernel.problems.registry import get_problem

    problem = get_problem(kind)
    if problem.adversarial_inputs is None:
        pytest.skip(f"{kind} has no numerics cases")
    shape = dict(problem.cpu_shapes[0])
    for dtype in sorted({problem.dtypes[0], torch.float32}, key=str):
        whole = problem.adversarial_inputs(dict(shape), dtype, "cpu", 321)
        for k, (name, args) in enumerate(whole):
            drawn = draw_set(problem.make_inputs, problem.adversarial_inputs, shape, dtype, "cpu", [321, k])
            assert len(drawn) == len(args) and all(map(_same_bits, drawn, args)), f"{kind} {dtype} case {k} ({name})"


def test_uniform_metadata_makes_a_base_of_an_overlapping_view_too():
    import torch

    from autokernel.harness.problem_spec import DRAWN_VERSION, uniform_metadata

    expanded = torch.arange(3.0).expand(4, 3)  # stride 0: no tensor of its strides can be written
    strided = torch.arange(12.0).reshape(3, 4)[:, ::2]
    (a, b, n) = uniform_metadata((expanded, strided, 7))
    assert n == 7
    for got, want in ((a, expanded), (b, strided)):
        assert got._base is None and got._version == DRAWN_VERSION and torch.equal(got, want)
    assert b.stride() == strided.stride()
