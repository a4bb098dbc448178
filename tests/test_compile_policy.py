"""What each op runs while torch.compile traces a patched model (integrate/compile_policy.py):
our kernel, opaque to inductor, or the problem's eager op, which inductor compiles and fuses as in
the original model."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from autokernel import apply
from autokernel.harness.baselines import Baseline
from autokernel.integrate import compile_policy
from autokernel.integrate.ops import OP_CALLS, TRACED_UNDER_COMPILE
from autokernel.problems import get_problem

sys.path.insert(0, str(Path(__file__).parent))
from test_integrate import llama, llama_problems, make_workdir, rel  # noqa: E402,F401  (a fixture among them)


def _graph_ops(model, inputs) -> set[str]:
    """The call targets of the graphs torch.compile hands its backend."""
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=recording_backend, fullgraph=True)
    with torch.no_grad():
        out = compiled(*inputs)
    return out, {str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("mode", ["ours", "eager", "auto"])
def test_under_compile_runs_our_ops_or_hands_inductor_the_eager_ops(tmp_path, llama, mode):
    wd = make_workdir(tmp_path / "wd", llama_problems())
    patched = apply(llama.model, wd, under_compile=mode)
    x = llama.make_inputs(7)
    before = dict(OP_CALLS)
    out, targets = _graph_ops(patched, x)
    with torch.no_grad():
        ref = llama.model(*x)
    assert rel(out, ref) < 1e-4
    ours = {t for t in targets if t.startswith("autokernel.")}
    ran = {op for op in patched._autokernel_ops.values() if OP_CALLS[op] > before.get(op, 0)}
    if mode == "eager":  # the original's graph: no op of ours, none of our kernels ran
        assert not ours and not ran
        assert all("eager op" in why for why in patched._autokernel_under_compile.values())
    else:  # "auto" on a CPU: no torch.compile time measured here, so our kernels
        assert len(ours) == len(patched._autokernel_ops) and ran == set(patched._autokernel_ops.values())
    with torch.no_grad():  # eager calls run our kernels whatever the mode
        before = dict(OP_CALLS)
        patched(*x)
    assert all(OP_CALLS[op] > before.get(op, 0) for op in patched._autokernel_ops.values())


def test_auto_hands_inductor_the_ops_it_compiles_at_least_as_fast(monkeypatch):
    problem = llama_problems()[0]  # rmsnorm at one shape, 1 call a forward
    kind = get_problem("rmsnorm")
    timed = {"compile_us": 9.0}
    monkeypatch.setattr(compile_policy, "cached_baseline",
                        lambda p, device_name, shape, dtype: Baseline(20.0, timed["compile_us"]))
    trace, why = compile_policy.choose("auto", kind, problem, ours_us=10.0, device_name="NVIDIA H200")
    assert trace and "9.0" in why and "10.0" in why
    timed["compile_us"] = 11.0
    assert compile_policy.choose("auto", kind, problem, ours_us=10.0, device_name="NVIDIA H200")[0] is False
    timed["compile_us"] = None  # torch.compile failed or never ran here: our kernel
    assert compile_policy.choose("auto", kind, problem, ours_us=10.0, device_name="NVIDIA H200")[0] is False
    assert compile_policy.choose("auto", kind, problem, ours_us=None, device_name="NVIDIA H200")[0] is False


def test_a_policy_set_is_undone_by_the_next(tmp_path, llama):
    wd = make_workdir(tmp_path / "wd", llama_problems())
    patched = apply(llama.model, wd, under_compile="eager")
    assert set(patched._autokernel_ops.values()) <= set(TRACED_UNDER_COMPILE)
    patched = apply(llama.model, wd, under_compile="ours")
    assert not set(patched._autokernel_ops.values()) & set(TRACED_UNDER_COMPILE)


def test_an_unknown_policy_is_a_clear_error(tmp_path, llama):
    from autokernel.integrate import IntegrateError

    wd = make_workdir(tmp_path / "wd", llama_problems())
    with pytest.raises(IntegrateError, match="under_compile must be one of auto, ours, eager"):
        apply(llama.model, wd, under_compile="inductor")
