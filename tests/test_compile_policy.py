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


def _record(wd: Path, patched, policy: str, device_name: str = "cpu") -> None:
    import json

    choice = compile_policy.ModelChoice(policy, 11.8, 11.3, device_name,
                                        compile_policy.kernel_digests(patched._autokernel_kernel_ops))
    (wd / "verify.json").write_text(json.dumps({"passed": True, "compile_choice": choice.to_dict()}))


def test_auto_follows_the_last_verifys_whole_model_timing_for_the_same_kernels_here(tmp_path, llama):
    wd = make_workdir(tmp_path / "wd", llama_problems())
    first = apply(llama.model, wd)  # no verify yet: per op, and no torch.compile time on a CPU
    assert not any("eager op" in why for why in first._autokernel_under_compile.values())
    _record(wd, first, "eager")
    handed = apply(llama.model, wd)
    assert set(handed._autokernel_ops.values()) <= set(TRACED_UNDER_COMPILE)
    assert all("11.300 ms so, 11.800 ms" in why for why in handed._autokernel_under_compile.values())
    assert not set(apply(llama.model, wd, under_compile="ours")._autokernel_ops.values()) & set(TRACED_UNDER_COMPILE)
    _record(wd, first, "per-op")
    assert not set(apply(llama.model, wd)._autokernel_ops.values()) & set(TRACED_UNDER_COMPILE)
    _record(wd, first, "eager", device_name="NVIDIA H200")  # measured on another machine
    assert not set(apply(llama.model, wd)._autokernel_ops.values()) & set(TRACED_UNDER_COMPILE)
    _record(wd, first, "eager")
    kernel = wd / "problems" / "rmsnorm" / "kernel.py"
    kernel.write_text(kernel.read_text() + "\n# changed after the verify\n")  # other kernels: not what was timed
    assert not set(apply(llama.model, wd)._autokernel_ops.values()) & set(TRACED_UNDER_COMPILE)


@pytest.mark.parametrize("handed_ms,policy", [(5.0, "eager"), (9.0, "per-op")])
def test_verify_times_compile_again_with_every_op_handed_over_and_keeps_the_faster(tmp_path, llama, handed_ms,
                                                                                    policy):
    from autokernel.integrate.cudagraphs import without_graphs
    from autokernel.verify import VerifyResult, _compile_handed_over, _compiled

    wd = make_workdir(tmp_path / "wd", llama_problems())
    patched = apply(llama.model, wd)
    x = llama.make_inputs(3)
    before = dict(OP_CALLS)
    with torch.no_grad():
        _compiled(without_graphs(patched), x, None, "aot_eager")(*x)  # the first compile: our ops in its graph
    assert all(OP_CALLS[op] > before.get(op, 0) for op in patched._autokernel_ops.values())
    result = VerifyResult(passed=True, model="llama", dtype="fp32", device="cpu", device_name="cpu",
                          compile_ms=7.0, compile_patched_ms=8.0)
    ran = {}

    def timer(fn):
        before = dict(OP_CALLS)
        with torch.no_grad():
            fn()
        ran.update({op: OP_CALLS[op] - before.get(op, 0) for op in patched._autokernel_ops.values()})
        return handed_ms

    _compile_handed_over(result, patched, patched._autokernel_kernel_ops, x, None, "aot_eager", timer, lambda _m: None)
    assert ran and not any(ran.values())  # the second compile traced the eager ops, none of ours
    assert result.compile_choice["policy"] == policy
    assert result.compile_choice["per_op_ms"] == 8.0 and result.compile_choice["eager_ms"] == handed_ms
    assert result.compile_patched_ms == min(8.0, handed_ms)
    handed = policy == "eager"
    assert all(("eager op" in why) == handed for why in result.under_compile.values())
    assert (set(patched._autokernel_ops.values()) <= set(TRACED_UNDER_COMPILE)) == handed
