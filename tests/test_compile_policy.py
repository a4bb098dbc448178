"""What each op runs while torch.compile traces a patched model (integrate/compile_policy.py):
our kernel, opaque to inductor, or the problem's eager op, which inductor compiles and fuses as in
the original model."""
from __future__ import annotations

import shutil
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


def _record(wd: Path, patched, policy: str, device_name: str = "cpu", uncompiled_ms: float | None = None) -> None:
    import json

    choice = compile_policy.ModelChoice(policy, 11.8, 11.3, device_name,
                                        compile_policy.kernel_digests(patched._autokernel_kernel_ops), uncompiled_ms)
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


def _graphs_made(model, inputs) -> int:
    """How many graphs torch.compile of ``model`` hands its backend (0: it traced nothing)."""
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=counting_backend)(*inputs)
    return len(graphs)


def test_uncompiled_leaves_the_patched_model_out_of_torch_compile_and_auto_follows_verify(tmp_path, llama):
    import copy

    wd = make_workdir(tmp_path / "wd", llama_problems())
    x = llama.make_inputs(5)
    per_op = apply(llama.model, wd)
    assert _graphs_made(per_op, x) >= 1
    _record(wd, per_op, "uncompiled", uncompiled_ms=10.9)
    for left_out in (apply(llama.model, wd), apply(llama.model, wd, under_compile="uncompiled")):
        assert left_out._autokernel_uncompiled and _graphs_made(left_out, x) == 0
        before = dict(OP_CALLS)
        with torch.no_grad():
            out = torch.compile(left_out, backend="eager")(*x)
            ref = llama.model(*x)
        assert rel(out, ref) < 1e-4
        assert all(OP_CALLS[op] > before.get(op, 0) for op in left_out._autokernel_ops.values())  # our kernels ran
    assert all("leaves the patched model out" in why for why in left_out._autokernel_under_compile.values())
    twin = copy.deepcopy(left_out)  # a copy runs its own weights, not the original's
    with torch.no_grad():
        for p in twin.parameters():
            p.zero_()
        assert rel(left_out(*x), ref) < 1e-4 and not torch.equal(twin(*x), left_out(*x))
    assert not getattr(apply(llama.model, wd, under_compile="ours"), "_autokernel_uncompiled", False)
    # measured on the CUDA-graph wrapper: not a choice for the model without it
    choice = compile_policy.ModelChoice("uncompiled", 11.8, 11.3, "cpu",
                                        compile_policy.kernel_digests(per_op._autokernel_kernel_ops), 1.7, True)
    import json
    (wd / "verify.json").write_text(json.dumps({"passed": True, "compile_choice": choice.to_dict()}))
    assert not getattr(apply(llama.model, wd), "_autokernel_uncompiled", False)
    assert compile_policy.recorded_choice(wd, "cpu", per_op._autokernel_kernel_ops, cuda_graphs=True) == choice


def test_the_whole_model_policy_is_the_fastest_of_what_was_timed():
    policy = compile_policy.whole_model_policy
    assert policy(10.0, None) == "per-op" and policy(10.0, 9.0) == "eager" and policy(10.0, 10.0) == "per-op"
    assert policy(10.0, None, 9.5) == "uncompiled" and policy(10.0, 9.0, 9.5) == "eager"
    assert policy(10.0, 9.0, 8.0) == "uncompiled" and policy(10.0, None, 10.0) == "per-op"


@pytest.mark.parametrize("handed_ms,left_out_ms,policy", [(5.0, None, "eager"), (9.0, None, "per-op"),
                                                         (5.0, 3.5, "uncompiled"), (5.0, 5.5, "eager")])
def test_verify_times_compile_again_and_keeps_the_fastest(tmp_path, llama, handed_ms, left_out_ms, policy):
    """compile(patched) 8 ms lost to compile(original) 7 ms: timed again with every op handed to
    inductor (handed_ms); where that still loses to the patched model uncompiled (4 ms when
    left_out_ms is set), timed once more with the patched model left out of the compile."""
    from torch._dynamo.utils import counters

    from autokernel.integrate.cudagraphs import without_graphs
    from autokernel.verify_timing import VerifyResult, _compile_again, _compiled

    wd = make_workdir(tmp_path / "wd", llama_problems())
    patched = apply(llama.model, wd)
    x = llama.make_inputs(3)
    before = dict(OP_CALLS)
    with torch.no_grad():
        _compiled(without_graphs(patched), x, None, "aot_eager")(*x)  # the first compile: our ops in its graph
    assert all(OP_CALLS[op] > before.get(op, 0) for op in patched._autokernel_ops.values())
    result = VerifyResult(passed=True, model="llama", dtype="fp32", device="cpu", device_name="cpu",
                          compile_ms=7.0, compile_patched_ms=8.0, patched_ms=4.0 if left_out_ms else None)
    timings = [handed_ms, left_out_ms]
    ran, graphs = [], []

    def timer(fn):
        before = dict(OP_CALLS)
        with torch.no_grad():
            fn()
        ran.append({op: OP_CALLS[op] - before.get(op, 0) for op in patched._autokernel_ops.values()})
        graphs.append(counters["stats"]["unique_graphs"])
        return timings[len(ran) - 1]

    _compile_again(result, patched, patched._autokernel_kernel_ops, x, None, "aot_eager", timer, lambda _m: None)
    assert len(ran) == (2 if left_out_ms else 1)
    assert ran[0] and not any(ran[0].values())  # the second compile traced the eager ops, none of ours
    if left_out_ms:  # the third compiled nothing: the patched model ran as it is, our kernels
        assert graphs[1] == graphs[0] and all(ran[1].values())
    choice = result.compile_choice
    assert choice["policy"] == policy
    assert choice["per_op_ms"] == 8.0 and choice["eager_ms"] == handed_ms and choice["uncompiled_ms"] == left_out_ms
    assert result.compile_patched_ms == min(t for t in (8.0, handed_ms, left_out_ms) if t is not None)
    handed = policy == "eager"
    assert all(("eager op" in why) == handed for why in result.under_compile.values())
    assert (set(patched._autokernel_ops.values()) <= set(TRACED_UNDER_COMPILE)) == handed
    assert bool(getattr(patched, "_autokernel_uncompiled", False)) == (policy == "uncompiled")


def _inductor_calls(model, inputs) -> tuple[list[str], int]:
    """What inductor's code for ``model`` calls: its library kernels in order (mm, addmm...) and how
    many kernels it generated."""
    import re

    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with torch.no_grad():
        _, codes = run_and_get_code(torch.compile(model), *inputs)
    code = "\n".join(codes)
    return re.findall(r"extern_kernels\.(\w+)\(", code), len(re.findall(r"^\s+cpp_fused_\w+\(", code, re.M))


@pytest.mark.skipif(shutil.which("g++") is None, reason="inductor's CPU code needs a C++ compiler")
def test_with_every_op_handed_to_inductor_the_patched_llama_compiles_to_the_originals_kernels(tmp_path, llama):
    """Handed over, the switched places compute what the model's own code did, in its shapes.  The
    ops took rows of a 2-D reshape: inductor then made the residual adds of the GEMMs' outputs
    cuBLAS addmm and split them from their norms (2 addmm and one more kernel here); torch.compile
    of the patched LLaMA example ran 3% slower than of the original on the H200."""
    wd = make_workdir(tmp_path / "wd", llama_problems())
    patched = apply(llama.model, wd, under_compile="eager")
    x = llama.make_inputs(3)
    original_calls = _inductor_calls(llama.model, x)
    assert original_calls[0] and original_calls[1]  # the code was read: GEMMs and generated kernels
    assert _inductor_calls(patched, x) == original_calls
