"""Eighth red-team pass on the judge (CPU, Triton interpreter): attacks that pass today, with the
static checks on.  Each test asserts the verdict the judge *should* give and is marked
``xfail(strict=True)``: CI stays green while the hole is open, and the test flips (XPASS fails
the run) once a fix catches it, to be turned into a plain test then.  The tests that are not
xfail check that each attack still does what its docstring says (so an xfail cannot stay green
because the attack rotted)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from autokernel.harness import Evaluator

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS, REDUCE_STARTER, rules  # noqa: E402
from test_harness_integrity import rules as static_rules  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

SETTINGS = dict(device="cpu", shapes=["64x256"], dtypes=["fp32"], timeout_s=120, baselines=False)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ATTACKS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _judge(name: str, incumbent: Path | None = None):
    with Evaluator("reduce", **SETTINGS) as ev:
        return ev.evaluate(ATTACKS / name, incumbent_file=incumbent)


@pytest.mark.parametrize("name", ["reduce_pass8_numerics_draw_told_apart.py", "reduce_pass8_interop_thread_load.py",
                                  "reduce_pass8_interop_thread_compute.py"])
def test_the_pass8_attacks_meet_the_run_time_checks_with_the_static_ones_on(name):
    assert static_rules((ATTACKS / name).read_text()) == set()


def test_numerics_draws_are_told_apart_from_regular_timed_draws_by_their_metadata():
    """What reduce_pass8_numerics_draw_told_apart.py relies on: its shortcut runs on the worker's
    regular fp32 draws and on no numerics draw that holds a NaN or an inf."""
    from autokernel.harness.problem_spec import draw_set
    from autokernel.problems.registry import get_problem

    attack, problem = _load("reduce_pass8_numerics_draw_told_apart.py"), get_problem("reduce")
    shape = {"M": 64, "N": 256}
    for seed in (1, 2, 3):
        assert attack._regular_timed_draw(draw_set(problem.make_inputs, problem.adversarial_inputs, shape,
                                                   torch.float32, "cpu", seed)[0])
    names = [name for name, _ in problem.adversarial_inputs(shape, torch.float32, "cpu", 5)]
    for k, name in enumerate(names):
        x = draw_set(problem.make_inputs, problem.adversarial_inputs, shape, torch.float32, "cpu", [5, k])[0]
        if not bool(torch.isfinite(x).all()):
            assert not attack._regular_timed_draw(x), name
    # and the shortcut is wrong where a NaN reaches it
    x = torch.ones(2, 64)
    x[0, 3] = float("nan")
    x = x.clone()
    x.add_(0.0)  # one in-place op on a fresh tensor, as a residual add in a model
    out = attack.kernel_fn(x)
    assert attack._regular_timed_draw(x) and not bool(torch.isnan(out[0]))


@pytest.mark.xfail(strict=True, reason="open: numerics timed draws are told apart from regular draws by the input's "
                                       "version counter and view base (and parent-sent sets by is_shared)")
def test_a_kernel_that_drops_nans_on_regular_timed_draws_is_caught():
    result = _judge("reduce_pass8_numerics_draw_told_apart.py")
    assert result.verdict in ("rejected", "incorrect"), result.message


@pytest.mark.xfail(strict=True, reason="open: a torch.jit.fork made while the file loads runs on torch's inter-op "
                                       "pool, a C++ thread no thread count of the worker's sees")
def test_a_background_torchscript_thread_that_loads_the_cpu_between_calls_is_caught():
    """Today: pass, and in keep/revert against the starter 'significantly faster' with the wall
    clock confirming, in 3 of 4 runs (median ratios 0.65, 0.77, 0.65; the starter against itself
    0.89-0.93, never significant): the same kernel as the starter, with the incumbent slowed.
    The verdict is asserted, not the comparison: how much the load takes depends on idle cores."""
    result = _judge("reduce_pass8_interop_thread_load.py", incumbent=REDUCE_STARTER)
    assert result.verdict == "rejected" and "threads-or-streams" in rules(result), (result.message, result.vs_incumbent)


def test_the_torchscript_server_computes_the_row_sums_off_the_callers_thread():
    """What reduce_pass8_interop_thread_compute.py relies on: its outputs are right with no torch
    compute op on the caller's thread (its Triton kernels only copy).  In a child process: the
    server thread never ends, and the child leaves with ``os._exit``."""
    script = textwrap.dedent(f"""
        import importlib.util, os, torch
        from torch.utils._python_dispatch import TorchDispatchMode
        seen = []
        class Ops(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                seen.append(str(func))
                return func(*args, **(kwargs or {{}}))
        spec = importlib.util.spec_from_file_location("attack", {str(ATTACKS / "reduce_pass8_interop_thread_compute.py")!r})
        attack = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(attack)
        x = torch.randn(5, 300)
        with Ops():
            out = attack.kernel_fn(x)
        print("RIGHT", bool(torch.allclose(out, x.sum(-1), atol=1e-4)), "SUMS", [op for op in seen if "sum" in op], flush=True)
        os._exit(0)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert "RIGHT True SUMS []" in done.stdout, (done.stdout, done.stderr[-2000:])


@pytest.mark.xfail(strict=True, reason="open: a torch.jit.fork made while the file loads runs torch ops unwatched on "
                                       "torch's inter-op pool; the Triton kernels only copy")
def test_row_sums_computed_by_a_background_torchscript_thread_are_caught():
    result = _judge("reduce_pass8_interop_thread_compute.py")
    assert result.verdict == "rejected" and rules(result) & {"foreign-compute", "threads-or-streams"}, result.message
