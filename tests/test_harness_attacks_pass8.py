"""Eighth red-team pass on the judge (CPU, Triton interpreter): three attacks that passed with the
static checks on, and what catches them now (each test here failed, or was a strict xfail,
before its fix).  The other tests check that each attack still does what its docstring says."""
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
from test_harness_attacks import ATTACKS, REDUCE_STARTER, no_static_checks, rules  # noqa: E402,F401  (a fixture)
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


def test_the_numerics_attack_meets_the_run_time_checks_with_the_static_ones_on():
    assert static_rules((ATTACKS / "reduce_pass8_numerics_draw_told_apart.py").read_text()) == set()


@pytest.mark.parametrize("name", ["reduce_pass8_interop_thread_load.py", "reduce_pass8_interop_thread_compute.py"])
def test_torchscript_and_torch_futures_are_static_findings(name):
    """Both passed with the static checks on before: torch.jit was no finding."""
    assert "threads-or-streams" in static_rules((ATTACKS / name).read_text())
    assert "threads-or-streams" in static_rules("import torch\nt = torch\nf = t.futures\n")
    assert "threads-or-streams" in static_rules("from torch import jit\n")
    assert static_rules("import triton\n\n\n@triton.jit\ndef k(x):\n    pass\n") == set()


def _signature(args) -> list:
    return [(t._version, t._base is None, t.is_shared(), t.storage_offset()) for t in args
            if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("kind", ["reduce", "softmax", "rmsnorm", "rotary", "cross_entropy", "attention"])
def test_every_timed_draw_carries_the_same_metadata_whatever_drew_it(kind):
    """reduce_pass8_numerics_draw_told_apart.py told numerics draws from regular ones by their
    version counter and view base (a regular reduce draw: a base at version 1; numerics cases at
    0 or 2, or a view); every drawn tensor is now a base at one version counter."""
    from autokernel.harness.problem_spec import draw_set
    from autokernel.problems.registry import get_problem

    problem = get_problem(kind)
    shape = dict(problem.shapes_for("cpu")[0])
    regular = [_signature(draw_set(problem.make_inputs, problem.adversarial_inputs, shape, torch.float32, "cpu", seed))
               for seed in (1, 2)]
    assert regular[0] == regular[1]
    names = [name for name, _ in problem.adversarial_inputs(shape, torch.float32, "cpu", 5)]
    for k, name in enumerate(names):
        drawn = draw_set(problem.make_inputs, problem.adversarial_inputs, shape, torch.float32, "cpu", [5, k])
        assert _signature(drawn) == regular[0], name


def _retargeted(tmp_path: Path, test: str) -> Path:
    source = (ATTACKS / "reduce_pass8_numerics_draw_told_apart.py").read_text()
    old = "(not x.is_shared()) and x._version == 1 and x._base is None"
    assert old in source
    path = tmp_path / "kernel.py"
    path.write_text(source.replace(old, test))
    return path


def test_the_kernel_that_dropped_nans_on_regular_draws_is_honest_or_caught(tmp_path):
    """Before: pass (6 stages and timing), dropping NaN/inf on regular timed draws only.  Now its
    test of the metadata answers the same for every draw: as written it never takes its
    shortcut (an honest kernel, which passes); aimed at the new metadata it takes it on every
    draw, the numerics cases included, and is caught."""
    attack = _load("reduce_pass8_numerics_draw_told_apart.py")
    from autokernel.harness.problem_spec import draw_set
    from autokernel.problems.registry import get_problem

    problem, shape = get_problem("reduce"), {"M": 64, "N": 256}
    assert not any(attack._regular_timed_draw(draw_set(problem.make_inputs, problem.adversarial_inputs, shape,
                                                       torch.float32, "cpu", seed)[0]) for seed in (1, 2, 3))
    assert _judge("reduce_pass8_numerics_draw_told_apart.py").verdict == "pass"
    with Evaluator("reduce", **SETTINGS) as ev:
        result = ev.evaluate(_retargeted(tmp_path, "x._version >= 1 and x._base is None"))
    assert result.verdict in ("incorrect", "rejected"), result.message


def test_a_background_torchscript_thread_that_loads_the_cpu_between_calls_is_caught(no_static_checks):
    """Before: pass, and in keep/revert against the starter 'significantly faster' with the wall
    clock confirming, in 3 of 4 runs (median ratios 0.65, 0.77, 0.65; the starter against itself
    0.89-0.93, never significant): the same kernel as the starter, with the incumbent slowed.
    Now (static checks off, the run-time layer alone) compiling TorchScript and forking count as
    thread starts (launches.TORCH_THREAD_ENTRIES).  Since the tenth pass ``torch.jit.script``'s
    parse of the function's Python source is refused first (the code rule, ``introspection``); the
    thread entries are still what catches TorchScript compiled without Python's parser
    (test_harness_attacks_pass9.py: an archive, ``CompilationUnit``)."""
    result = _judge("reduce_pass8_interop_thread_load.py", incumbent=REDUCE_STARTER)
    assert result.verdict == "rejected" and "introspection" in rules(result), (result.message, result.vs_incumbent)
    assert result.failed_stage == "load"  # before any call, before any timing


def row_sums_off_the_callers_thread(path: Path) -> str:
    """The stdout of a child process that runs ``path``'s ``kernel_fn`` on a 5x300 input under a
    dispatch mode recording the caller's ops: "RIGHT <outputs right> SUMS <sum ops seen>".  In a
    child process: a server thread of the file's never ends, and the child leaves with ``os._exit``."""
    script = textwrap.dedent(f"""
        import importlib.util, os, torch
        from torch.utils._python_dispatch import TorchDispatchMode
        seen = []
        class Ops(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                seen.append(str(func))
                return func(*args, **(kwargs or {{}}))
        spec = importlib.util.spec_from_file_location("attack", {str(path)!r})
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
    return done.stdout + done.stderr[-2000:]


def test_the_torchscript_server_computes_the_row_sums_off_the_callers_thread():
    """What reduce_pass8_interop_thread_compute.py relies on: its outputs are right with no torch
    compute op on the caller's thread (its Triton kernels only copy)."""
    out = row_sums_off_the_callers_thread(ATTACKS / "reduce_pass8_interop_thread_compute.py")
    assert "RIGHT True SUMS []" in out, out


def test_row_sums_computed_by_a_background_torchscript_thread_are_caught(no_static_checks):
    result = _judge("reduce_pass8_interop_thread_compute.py")
    # (the code rule refuses torch.jit.script's parse of the source first, as above)
    assert result.verdict == "rejected" and "introspection" in rules(result), result.message
