"""Attacks on the judge, one file per trick (tests/attacks/), each written as an optimiser
rewarded for passing would write it with the harness source open.  Every ``reduce_*`` file here
passed ``autokernel bench`` at base commit 4d4b81e (or, for the tensor subclass, crashed the
judge itself) unless its comment below says otherwise; each is now caught, with the verdict and
the rule named.  ``RUNTIME`` runs some of them again with the static checks switched off in the
judge, as a cleverer file that slipped past them would be: the run-time layer must still catch
them.  Honest but unusual kernels must still pass."""
from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from autokernel.harness import Evaluator, integrity
from autokernel.problems.registry import KERNELS_DIR

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

ATTACKS = Path(__file__).parent / "attacks"
REDUCE_STARTER = KERNELS_DIR / "reduce.py"


@pytest.fixture(scope="module")
def reduce_eval():
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=30, timing=False) as ev:
        yield ev


def rules(ev) -> set[str]:
    return {f.rule for f in ev.integrity}


def judge_attack(tmp_path: Path, name: str, edit: tuple[str, str] | None = None, **options):
    """The judge's evaluation of attack file ``name`` (``edit``: a text of it replaced first) for
    reduce at 8x64 fp32, no baselines."""
    source = (ATTACKS / name).read_text()
    path = tmp_path / "kernel.py"
    path.write_text(source.replace(*edit) if edit else source)
    settings = dict(device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=60, baselines=False)
    with Evaluator("reduce", **dict(settings, **options)) as ev:
        return ev.evaluate(path)


@pytest.mark.parametrize("name,verdict,rule,stage", [
    # transport: nothing the kernel returns is rebuilt as an object in the judge
    ("reduce_reduce_in_parent.py", "incorrect", "not a tensor", "smoke"),
    ("reduce_tensor_subclass.py", "incorrect", "subclass of torch.Tensor", "smoke"),  # crashed the judge before
    # incorrect before (8 outputs, not 1); its float(v) reads values into Python, rejected first now
    ("reduce_list_of_floats.py", "rejected", "foreign-compute", "smoke"),
    # every call judged: inputs fresh, outputs new allocations
    # no-kernel at determinism before; its fingerprint of sampled values (float(x[0])) reads
    # values into Python, rejected at the first call now
    ("reduce_memo_ptr.py", "rejected", "foreign-compute", "smoke"),
    ("reduce_ring4.py", "rejected", "cached-output", None),
    # the watch cannot be escaped
    ("reduce_interpreter_frame.py", "rejected", "introspection", "static"),
    ("reduce_mode_probe.py", "rejected", "torch-op", "static"),
    ("reduce_thread_import.py", "rejected", "introspection", "static"),
    ("reduce_thread_joined.py", "rejected", "threads-or-streams", "static"),  # static before too; see RUNTIME
    ("reduce_thread_at_load.py", "rejected", "threads-or-streams", "static"),  # static before too; see RUNTIME
    ("reduce_numpy.py", "rejected", "foreign-compute", "static"),
    ("reduce_python_compute.py", "rejected", "foreign-compute", "smoke"),
    # compute on the host, written into an output that the file's own kernel then stores or
    # rewrites (found by a red-team pass after the rebuild; each passed all six stages): tensor
    # values may not reach Python during a call
    ("reduce_python_item.py", "rejected", "foreign-compute", "smoke"),  # .item() + fill_
    ("reduce_host_tolist.py", "rejected", "foreign-compute", "static"),  # tolist() + fill_; see RUNTIME
    ("reduce_host_memory_file.py", "rejected", "foreign-compute", "smoke"),  # /proc/self/mem + Triton stores
    ("reduce_host_serialized.py", "rejected", "foreign-compute", "smoke"),  # torch.save bytes + copy_
    ("reduce_getattr_string.py", "rejected", "introspection", "static"),  # the watch caught it before too
    # judge state
    # a name added to torch.Tensor shadows TensorBase.copy_ for the worker's copy into the
    # parent's buffers (third red-team pass: passed all six stages writing zeros)
    ("reduce_tensor_copy_hijack.py", "rejected", "monkey-patch", "smoke"),
    # an aten::copy_ of its own registered through torch.library: the worker's copy into the
    # parent's buffers ran it (fourth red-team pass: passed all six stages and timing writing zeros)
    ("reduce_aten_copy_override.py", "rejected", "monkey-patch", "static"),
    ("reduce_frame_resnapshot.py", "rejected", "introspection", "static"),
    # an audit hook added at import got the frames of the watch's sys._getframe calls and slowed
    # the worker's clock (fourth red-team pass: passed, 20 ms a call reported as ~50 us)
    ("reduce_audit_hook_clock.py", "rejected", "introspection", "static"),
    # the row sums in C++ built with load_inline, a Triton kernel rewriting the output in place
    # (fourth red-team pass: passed all six stages and timing; not run past the static checks
    # here: the build takes a minute)
    ("reduce_native_inline.py", "rejected", "foreign-compute", "static"),
    # a SIGALRM handler set through _signal finishes each output after the timed window (a GPU
    # attack: see its comment)
    ("reduce_signal_after_call.py", "rejected", "introspection", "static"),
    # a torch function mode entered at import, through type() and a keyword: the same before and
    # after every call, it intercepted the worker's copy into the parent's buffers (fourth
    # red-team pass: passed all six stages and timing writing zeros)
    ("reduce_load_function_mode.py", "rejected", "introspection", "static"),
    # the worker's state reached through a traceback and class patterns of match (fourth
    # red-team pass: passed, each call sleeping 20 ms and reporting 20 us)
    ("reduce_match_frame_clock.py", "rejected", "introspection", "static"),
    ("reduce_timer_underreport.py", "rejected", "introspection", "static"),
    # the real work hidden in an attribute set on the output tensor (out.numel), or on its
    # storage's class through type(): the worker's first method call on the output after its
    # timer stopped ran the row sums, unwatched and untimed (fifth red-team pass: both passed all
    # six stages and timing at ~3 ms a call against ~645 ms for the same kernel doing its work)
    ("reduce_instance_method_late_work.py", "rejected", "monkey-patch", "smoke"),
    ("reduce_storage_class_late_work.py", "rejected", "monkey-patch", "smoke"),
    # the same planted attribute on a scratch tensor that an in-place op hands back to the watch:
    # the watch's own pointer read ran x.sum(-1) inside __torch_dispatch__, where torch had taken
    # the mode off its stack, and the attribute was gone before the call returned (fifth
    # red-team pass: passed all six stages, no torch op recorded)
    ("reduce_watch_storage_hook.py", "rejected", "monkey-patch", "smoke"),
    # the row sums in C built through Triton's own launcher helper (compile_module_from_src), a
    # Triton kernel of the file's own handed the output and writing nothing (fifth red-team pass:
    # passed all six stages and timing at ~3 ms a call against ~645 ms for the Triton row sums)
    ("reduce_native_triton_build.py", "rejected", "foreign-compute", "static"),
    # a child made with pty.fork at import stops the incumbent's worker half of the time (fifth
    # red-team pass: passed, and won keep/revert against the starter 65 ms to 200 ms, the
    # parent's wall clock confirming; the same kernel without the child: 76 ms to 106 ms)
    ("reduce_child_stops_incumbent.py", "rejected", "threads-or-streams", "static"),
    ("reduce_draw_rebinding.py", "rejected", "introspection", "static"),  # see the run-time test below
    ("reduce_import_hook_after_call.py", "rejected", "introspection", "static"),  # see RUNTIME
    ("reduce_child_fork_exec.py", "rejected", "introspection", "static"),  # see RUNTIME
])
def test_attack_is_caught(reduce_eval, name, verdict, rule, stage):
    ev = reduce_eval.evaluate(ATTACKS / name)
    assert ev.verdict == verdict and not ev.correct, ev.message
    if verdict == "rejected":
        assert rule in rules(ev), ev.message
    else:
        assert rule in ev.message
    if stage is not None:
        assert ev.failed_stage == stage, ev.message


@pytest.fixture
def no_static_checks(monkeypatch):
    """The judge with its static checks off: what a file that slipped past them meets."""
    monkeypatch.setattr(integrity, "static_findings", lambda source, filename="kernel.py", **_: [])


@pytest.mark.parametrize("name,rule", [
    # the exemption goes by code object, not file name (test_harness_watch.py); since the tenth pass
    # the compile of its text, after the file began to load, is refused first
    ("reduce_interpreter_frame.py", "introspection"),
    ("reduce_mode_probe.py", None),  # every call is watched: it never takes its cheating branch
    ("reduce_thread_import.py", "threads-or-streams"),
    ("reduce_thread_joined.py", "threads-or-streams"),  # the thread ended before the call returned
    ("reduce_numpy.py", "foreign-compute"),  # no-kernel before; its values reach numpy through the host
    ("reduce_getattr_string.py", "torch-op"),
    ("reduce_python_item.py", "foreign-compute"),
    ("reduce_host_tolist.py", "foreign-compute"),
    ("reduce_host_memory_file.py", "foreign-compute"),
    ("reduce_host_serialized.py", "foreign-compute"),
    # registrations are counted at torch's dispatcher binding; since the tenth pass torch.library's
    # Library, which takes its caller's frame, is refused first (a frame asked by the kernel's code)
    ("reduce_aten_copy_override.py", "introspection"),
    ("reduce_load_function_mode.py", "monkey-patch"),  # hooks compared with before the file loaded too
    ("reduce_audit_hook_clock.py", "monkey-patch"),  # audit hooks after the judge's own are refused and reported
    ("reduce_signal_after_call.py", "monkey-patch"),  # signal handlers and timers among the outside hooks
    # its build writes files and runs a compiler, neither under Triton's compiler: refused at the first write
    ("reduce_native_triton_build.py", "monkey-patch"),
    # a thread started while the file loaded, computing each call's sum unwatched (fifth red-team
    # pass: passed all six stages; threads were counted per call only)
    ("reduce_thread_at_load.py", "threads-or-streams"),
    # builtins.__import__ rebound by the call ran x.sum(-1) in the worker's first check after it,
    # unwatched, then put itself back (fifth red-team pass: passed all six stages; the names are
    # now compared first thing after the call returns, before any lookup of the judge's)
    ("reduce_import_hook_after_call.py", "monkey-patch"),
    # a child started through _posixsubprocess.fork_exec, which raises no audit event (fifth
    # red-team pass: passed all six stages); the worker counts its children, as their subreaper
    ("reduce_child_fork_exec.py", "threads-or-streams"),
])
def test_attack_that_slipped_past_the_static_checks_is_caught_at_run_time(reduce_eval, no_static_checks, name, rule):
    ev = reduce_eval.evaluate(ATTACKS / name)
    if name == "reduce_mode_probe.py":  # with the watch on every call it never takes its cheating branch
        assert ev.verdict == "pass", ev.message
        return
    assert ev.verdict == "rejected" and rule in rules(ev), ev.message


def test_poison_probe_never_gets_to_cheat(tmp_path):
    attack = tmp_path / "poison_probe.py"
    shutil.copy(ATTACKS / "reduce_poison_probe.py", attack)
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=30, baselines=False,
                   writable=[tmp_path]) as ev:  # where it would note that it cheated
        result = ev.evaluate(attack)
    # its probe reads a value into Python (float(t)), which no call may do; before that rule it
    # passed honestly, every call (timed ones too) running poisoned and watched
    assert result.verdict == "rejected" and "foreign-compute" in rules(result), result.message
    assert not Path(str(attack) + ".cheated").exists()  # at base it cheated in every timed call


def test_under_reporting_timer_does_not_win_keep_revert(tmp_path, no_static_checks):
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=30, baselines=False) as ev:
        result = ev.evaluate(ATTACKS / "reduce_timer_underreport.py", incumbent_file=REDUCE_STARTER)
    # the worker times with the clock it took before the kernel loaded: the patched one never
    # reaches the reported times (it claimed a big win before, which only the parent's wall
    # clock refused); and since the fifth pass the names it rebinds (time.perf_counter, the
    # harness's own fingerprint function) are compared after every call, so it is rejected at
    # its first call instead of losing keep/revert
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "perf_counter" in result.message and result.vs_incumbent is None, result.message


def test_a_reported_gain_the_parents_wall_clock_does_not_see_is_not_confirmed():
    from autokernel.harness import timing

    # per round: reported per-call scores, and the parent's wall time per call around the request
    assert not timing.wall_confirms([10.0, 10.0, 10.0], [100.0, 100.0, 100.0], [500.0, 505.0, 498.0],
                                    [400.0, 402.0, 401.0])
    assert timing.wall_confirms([10.0, 10.0, 10.0], [100.0, 100.0, 100.0], [410.0, 412.0, 409.0],
                                [500.0, 503.0, 499.0])


def test_candidate_cannot_reach_the_incumbent(tmp_path):
    attack = tmp_path / "sabotage.py"
    shutil.copy(ATTACKS / "reduce_sabotage_incumbent.py", attack)
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=30, baselines=False,
                   writable=[tmp_path]) as ev:  # where it would note what it found
        result = ev.evaluate(attack, incumbent_file=REDUCE_STARTER)
    assert result.verdict == "pass" and result.vs_incumbent is not None, result.message
    assert not Path(str(attack) + ".found").exists()  # at base it found and slowed the incumbent's module


@pytest.mark.parametrize("problem,name,shapes", [
    ("softmax", "honest_softmax_two_kernels.py", ["4x100"]),
    ("matmul", "honest_matmul_split_k.py", ["16x24x40"]),
    ("cross_entropy", "honest_cross_entropy_lanes.py", ["6x70"]),
    ("rmsnorm", "honest_rmsnorm_split_columns.py", ["5x72"]),
])
def test_honest_but_unusual_kernels_pass(problem, name, shapes):
    with Evaluator(problem, device="cpu", shapes=shapes, dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(ATTACKS / name)
    assert result.verdict == "pass", result.message


def test_softmax_computed_with_math_exp_on_item_scalars_is_foreign_compute():
    """Found by a red-team pass after the rebuild (it passed all six stages): the softmax in
    Python from ``.item()`` scalars, written with ``fill_``, then read and rewritten by a Triton
    kernel of the file's own."""
    with Evaluator("softmax", device="cpu", shapes=["4x100"], dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(ATTACKS / "softmax_python_item.py")
    assert result.verdict == "rejected" and "foreign-compute" in rules(result), result.message
    assert "read tensor values into Python" in result.message and result.failed_stage == "smoke"


@pytest.mark.parametrize("name", [
    "softmax_interp_duck_argument.py",
    # a plain tensor with untyped_storage planted on it, removed before the call returned (fifth
    # red-team pass: passed all six stages)
    "softmax_interp_planted_storage.py",
])
def test_duck_typed_launch_argument_cannot_run_torch_in_the_interpreters_frames(name):
    """Found by a red-team pass after the rebuild: an object posing as a tensor, whose storage's
    ``.cpu`` is ``functools.partial(torch.softmax, x)``, made the interpreter's own (exempt)
    frame compute the softmax; the file's kernel only copied it."""
    with Evaluator("softmax", device="cpu", shapes=["4x100"], dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(ATTACKS / name)
    # foreign-compute for the argument, or torch-op: the interpreter's frames exempt only its
    # copies' own ops (sixth red-team pass), whichever the judge meets first
    assert result.verdict == "rejected" and rules(result) & {"foreign-compute", "torch-op"}, result.message


def starter_wrapped(tmp_path: Path, wrapper: str) -> Path:
    """The reduce starter with ``wrapper`` appended (an attack that keeps the honest kernel
    and wraps its kernel_fn), written out as a kernel file."""
    path = tmp_path / "kernel.py"
    path.write_text(REDUCE_STARTER.read_text() + "\n\n" + textwrap.dedent(wrapper))
    return path


# the honest numbers, but kernel_fn replaces time.perf_counter (a baseline name of the tamper
# watch) through a plain local alias (the static rule only knows import aliases) with a function
# that restores the original on its first call and returns the entry time + 1 us: the worker's
# CPU timer read ~1 us; the watch, checked only at the end of the request, saw the original again
SELF_RESTORING_CLOCK = """
    import time

    _tm = time
    _orig_pc = _tm.perf_counter
    _real = kernel_fn


    def kernel_fn(x):
        entry = _orig_pc()

        def _fake_pc():
            _tm.perf_counter = _orig_pc
            return entry + 1e-6

        out = _real(x)
        _tm.perf_counter = _fake_pc
        return out
"""


def test_a_clock_rebound_during_the_call_does_not_reach_the_judges_timing(tmp_path):
    """Third red-team pass: kernel_fn rebinds time.perf_counter through a local alias to a
    function that puts the original back on its first call and answers the call's start plus
    1 us; the tamper check at the end of the request saw the original again and the starter
    scored ~18 us a shape.  The worker times with the clock it took before loading the kernel,
    so the rebound name is never called, never put back, and the tamper check sees it."""
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=60, baselines=False) as ev:
        result = ev.evaluate(starter_wrapped(tmp_path, SELF_RESTORING_CLOCK))
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "perf_counter" in result.message


def test_work_deferred_to_a_later_call_of_the_request_is_caught():
    """Found by the second red-team pass (it passed all six stages and timing): within one timed
    request the first calls return outputs they never wrote and the last call computes them all,
    so the median per-call time is a do-nothing launch while every output is right when the
    parent collects it.  A digest of each output taken right after its call no longer matches."""
    with Evaluator("rotary_table", device="cpu", timeout_s=60, baselines=False) as ev:
        result = ev.evaluate(ATTACKS / "rotary_table_deferred_write.py")
    assert result.verdict == "rejected" and "deferred-write" in rules(result), result.message
    assert result.failed_stage == "timing"


def test_output_digest_sees_any_change_of_bits_and_nothing_else():
    import torch

    from autokernel.harness.output_checks import output_digest

    out = torch.randn(7, 9, dtype=torch.bfloat16)
    strided = torch.randn(9, 7).t()  # not contiguous
    first = output_digest((out, strided))
    assert output_digest((out, strided)) == first
    out[6, 8] = out[6, 8] * 2 + 1
    assert output_digest((out, strided)) != first
    before = output_digest((out, strided))
    strided[0, 1] += 1.0
    assert output_digest((out, strided)) != before
    # two elements swapped: the plain sum is the same, the parity-weighted one is not
    x = torch.arange(6, dtype=torch.float32)
    d = output_digest((x,))
    x[0], x[1] = 1.0, 0.0
    assert output_digest((x,)) != d


def test_a_launch_made_while_another_stream_is_current_is_counted(monkeypatch):
    """GPU attack of the second red-team pass (not run here): the real kernel launched under a
    ``torch.Stream`` from torch's pool, which the stream counters did not see; the judge's stream
    got only padding.  Every launch now checks the current stream against the timed one."""
    from autokernel.harness import launches

    record = launches.LaunchRecord()
    call = record.begin(None, timed_stream=111)
    monkeypatch.setattr(launches, "current_stream_handle", lambda: 111)
    record.note(object(), (), {})
    assert call.off_stream == 0
    monkeypatch.setattr(launches, "current_stream_handle", lambda: 222)
    record.note(object(), (), {})
    assert call.off_stream == 1
    source = (ATTACKS / "softmax_gpu_pool_stream.py").read_text()
    assert "threads-or-streams" in {f.rule for f in integrity.static_findings(source)}


KERNELBENCH = Path(os.environ.get("KERNELBENCH_DIR") or Path(__file__).resolve().parent.parent.parent / "shared"
                   / "kernelbench")


@pytest.mark.skipif(not (KERNELBENCH / "level2").is_dir(), reason=f"the KernelBench files are not at {KERNELBENCH}")
@pytest.mark.parametrize("name,stage,said", [
    # a global module-registration hook of torch.nn, set at import, ran inside the worker's build
    # of the reference Model for each timed draw, recovered the input seed from
    # torch.initial_seed() and computed the output there; the call only copied it
    ("kb_gemm_draw_hook.py", "smoke", "torch.nn global module hook"),
    # the same work, started by a class of its own put in place of random.Random, which the
    # draw calls with its seed (neither a guarded name nor in the fingerprint before)
    ("kb_gemm_random_class.py", "load", "random.Random"),
])
@pytest.mark.parametrize("static", [True, False])
def test_no_code_of_the_kernels_runs_in_the_workers_draw(static, name, stage, said, monkeypatch):
    """Fourth red-team pass: each passed all six stages and timing (2.5x and 1.8x the honest
    Triton GEMM on the CPU), computing every timed call's output in the worker's draw."""
    from autokernel.problems.kernelbench import KernelBenchOptions, load_kernelbench

    if not static:
        monkeypatch.setattr(integrity, "static_findings", lambda source, filename="kernel.py", **_: [])
    problem = load_kernelbench(KERNELBENCH / "level2" / "12_Gemm_Multiply_LeakyReLU.py", KernelBenchOptions(scale=0.005))
    with Evaluator(problem, device="cpu", shapes=problem.cpu_shapes[:1], timeout_s=60, baselines=False) as ev:
        result = ev.evaluate(ATTACKS / name)
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert result.failed_stage == ("static" if static else stage), result.message
    assert static or said in result.message, result.message


@pytest.mark.skipif(not (KERNELBENCH / "level2").is_dir(), reason=f"the KernelBench files are not at {KERNELBENCH}")
def test_a_torch_nn_class_rebound_for_the_draw_is_caught(monkeypatch):
    """Fifth red-team pass (passed all six stages and timing with the timed numerics draws off, as
    most timed calls are on a GPU): kb_gemm_draw_hook.py without a hook, nn.Linear.reset_parameters
    and nn.LeakyReLU.__init__ rebound through local aliases ran inside the worker's build of the
    reference Model for each timed draw.  Every module class of torch.nn is guarded after each
    call now, as torch.Tensor is.  (Static checks off: since the sixth pass, assigning
    ``__init__`` on an object is a static finding too.)"""
    monkeypatch.setattr(integrity, "static_findings", lambda source, filename="kernel.py", **_: [])
    from autokernel.problems.kernelbench import KernelBenchOptions, load_kernelbench

    problem = load_kernelbench(KERNELBENCH / "level2" / "12_Gemm_Multiply_LeakyReLU.py", KernelBenchOptions(scale=0.005))
    with Evaluator(problem, device="cpu", shapes=problem.cpu_shapes[:1], timeout_s=60, baselines=False) as ev:
        result = ev.evaluate(ATTACKS / "kb_gemm_class_patch.py")
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "LeakyReLU.__init__" in result.message and result.failed_stage == "smoke", result.message


# on inputs the worker drew itself (timed calls: not in shared memory, unlike the judge's own
# sets, until pass 9) the starter uses its input as scratch space and hides that by resizing it
# to nothing (``resize_`` is an allowed op)
RESIZED_INPUT = """
    _honest = kernel_fn


    def kernel_fn(x):
        out = _honest(x)
        if not x.is_shared():
            x.zero_()  # scratch space
            x.resize_(0)
        return out
"""


def test_an_input_resized_after_use_as_scratch_is_not_a_skipped_check(tmp_path):
    """Fourth red-team pass (passed all six stages and timing): on the inputs the worker drew, the
    kernel wrote into its input and then resized it to nothing; the worker copied an input back
    only when its shape matched the judge's draw, so the judge compared its draw with itself.
    It did so on unshared inputs only; since every input is the worker's own copy (pass 9:
    tests/test_harness_input_sets.py) it does so on the first call of all, whose copy cannot be
    written back over the judge's set."""
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=60, baselines=False) as ev:
        result = ev.evaluate(starter_wrapped(tmp_path, RESIZED_INPUT))
    assert result.verdict == "rejected" and "modified-input" in rules(result), result.message
    assert result.failed_stage == "smoke" and "resized it" in result.message, result.message


def test_only_registrations_over_operators_the_judge_could_run_count():
    """torch registers lazily too (torch.compile adds 82 implementations on first use, for ops it
    defines then or for the Meta key): those must not read as the kernel's tampering."""
    import torch

    from autokernel.harness import registrations

    counter = registrations.install()
    before = counter.count
    own = torch.library.Library("autokernel_test_ops", "DEF")
    own.define("twice(Tensor x) -> Tensor")
    own.impl("twice", lambda x: x * 2, "CPU")  # a new operator: nothing the judge calls
    meta = torch.library.Library("aten", "IMPL")
    meta.impl("cumsum", lambda *a, **k: None, "Meta")  # fake tensors only
    assert counter.since(before) is None
    aten = torch.library.Library("aten", "IMPL")
    aten.impl("neg", lambda x: x, "CPU")
    assert counter.since(before) == "impl(aten::neg, CPU)"
    for lib in (own, meta, aten):
        lib._destroy()


def test_the_workers_checks_never_call_methods_through_a_tensor():
    """Attributes a kernel sets on a tensor (or on its storage) shadow the class's methods: the
    worker's checks call the C functions, and name what was planted."""
    import torch

    from autokernel.harness.output_checks import numel, output_digest, planted, span

    ran = []
    t = torch.arange(6.0)
    t.numel = t.detach = lambda: ran.append("tensor")
    storage = t.untyped_storage()
    storage.data_ptr = storage.nbytes = lambda: ran.append("storage")
    assert numel(t) == 6 and span(t)[1] - span(t)[0] == 24
    assert output_digest((t,)) == output_digest((torch.arange(6.0),))
    assert not ran
    assert planted([t]) == "tensor 0: .numel, tensor 0: .detach, tensor 0's storage: .data_ptr, tensor 0's storage: .nbytes"
    assert planted([torch.arange(3.0), 1.5]) is None


def test_a_child_process_cannot_reach_the_incumbent(tmp_path, no_static_checks):
    """Fifth red-team pass: a child forked at import (pty.fork) stopped the incumbent's worker
    with SIGSTOP half of every 20 ms and won keep/revert with the honest row sums.  A process
    started (or a signal sent to another process) after the judge set up is refused and
    reported, whether the file loads or catches the refusal."""
    attack = tmp_path / "child.py"
    shutil.copy(ATTACKS / "reduce_child_stops_incumbent.py", attack)
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=30, baselines=False) as ev:
        result = ev.evaluate(attack, incumbent_file=REDUCE_STARTER)
    assert result.verdict == "rejected" and "threads-or-streams" in rules(result), result.message
    assert result.failed_stage == "load" and "forkpty" in result.message, result.message
    assert not Path(str(attack) + ".stopped").exists()


def test_a_candidate_cannot_rewrite_the_incumbents_file(tmp_path):
    """Fifth red-team pass: while loading, the candidate rewrote the kernel files next to it (the
    incumbent of ``bench --against``, the workspace's kernel.py) to sleep 50 ms a call; the judge
    read the incumbent's text afterwards and the honest row sums won keep/revert, leaving the
    incumbent's file rewritten.  The kernel's code may not write files (nor start processes)."""
    attack, incumbent = tmp_path / "candidate.py", tmp_path / "incumbent.py"
    shutil.copy(ATTACKS / "reduce_rewrite_incumbent_file.py", attack)
    shutil.copy(REDUCE_STARTER, incumbent)
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=30, baselines=False) as ev:
        result = ev.evaluate(attack, incumbent_file=incumbent)
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert result.failed_stage == "load" and "incumbent.py" in result.message, result.message
    assert incumbent.read_text() == REDUCE_STARTER.read_text()
    assert not Path(str(attack) + ".rewrote").exists()


def test_a_kernel_unsafe_on_timed_calls_only_meets_numerics_there():
    """Fifth red-team pass (passed all six stages and timing): a softmax that subtracts the row
    max on correctness calls and not on timed calls, told apart by the order of the judge's
    shapes (the target shapes again after the edges and held-out shapes); timed inputs were plain
    random draws, where exp without the max is within tolerance.  Timed calls now draw the
    problem's numerics cases too, each one checked."""
    with Evaluator("softmax", device="cpu", shapes=["4x100"], dtypes=["fp32"], timeout_s=60, baselines=False) as ev:
        result = ev.evaluate(ATTACKS / "softmax_unsafe_when_timed.py")
    assert result.verdict == "rejected" and "cached-output" in rules(result), result.message
    assert result.failed_stage == "timing" and "numerics variant" in result.message, result.message


def test_a_name_rebound_for_the_next_draw_is_caught_after_the_call(no_static_checks):
    """Fifth red-team pass (with the static checks off: it imports builtins; passed all six
    stages and timing at 5 ms a call against 151 ms for the same row sums, with the timed
    numerics draws off): on timed calls the kernel rebinds torch.randn through a local alias; the
    worker's next draw runs it, and the add_ it plants on the drawn tensor computes the row sums
    with PyTorch, unwatched and untimed; the next call copies them.  A rebound sorted, which the
    worker calls once a request ends, put both back before the fingerprint was read.  The names
    are now compared after every call, before the judge's own work.  It told timed calls by
    ``not x.is_shared()``; since every input is the worker's own copy (pass 9) it rebinds on the
    first call of all, and is caught there."""
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=60, baselines=False) as ev:
        result = ev.evaluate(ATTACKS / "reduce_draw_rebinding.py")
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "torch.randn" in result.message and result.failed_stage == "smoke", result.message


def test_the_outside_rule_uses_what_it_took_when_armed(monkeypatch):
    """A signal to the worker itself is allowed, one to another process is not: the rule
    compares with the pid taken when it was armed, so rebinding os.getpid (through a local
    alias) does not pass a signal to the incumbent as one to itself."""
    import os

    from autokernel.harness import host_reads

    rule = dict(host_reads._OUTSIDE_RULE, pid=os.getpid(), signals_only=False)
    other = os.getpid() + 1
    monkeypatch.setattr(os, "getpid", lambda: other)
    assert host_reads._outside_refused("os.kill", (other, 19), None, rule)[0] == "threads-or-streams"
    assert host_reads._outside_refused("os.kill", (other, 0), None, rule) is None


def _compile_under_the_outside_rule(tmp_path, mode: str) -> dict:
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "outside_rule_compile.py"), mode,
                           str(tmp_path / "written.txt")], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_triton_compiles_for_real_under_the_outside_rule(tmp_path):
    """Triton's compiler may start ptxas and write its cache after the kernel loads: a real
    compile (ptxas ships with Triton, no GPU needed) goes through the trusted-frames rule."""
    found = _compile_under_the_outside_rule(tmp_path, "plain")
    assert found["error"] is None and found["refused"] == [], found
    assert found["cached_files"] > 0, found


def test_code_of_the_kernels_inside_the_compiler_is_not_the_compiler(tmp_path, no_static_checks):
    """Sixth session: Triton calls a cache manager class its caller chooses from inside
    ``compile``; the judge exempted anything below a compiler frame, and a candidate's manager
    rewrote the incumbent's kernel file there (passed all six stages with the static checks off,
    the incumbent left sleeping 50 ms a call).  Only trusted code between the compiler's frame and
    the event counts as the compiler."""
    found = _compile_under_the_outside_rule(tmp_path, "manager")
    assert not found["target_written"] and found["refused"], found
    # the same without changing a setting: a function of Triton's that compile calls, replaced
    found = _compile_under_the_outside_rule(tmp_path, "patched")
    assert not found["target_written"], found
    assert found["refused"] and found["refused"][0][0] == "monkey-patch", found
    attack, incumbent = tmp_path / "candidate.py", tmp_path / "incumbent.py"
    shutil.copy(ATTACKS / "reduce_rewrite_via_compiler_frame.py", attack)
    shutil.copy(REDUCE_STARTER, incumbent)
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=60, baselines=False) as ev:
        result = ev.evaluate(attack, incumbent_file=incumbent)
    # the manager class is a changed setting too: Triton's first process after it (ptxas's
    # version check) is refused before the manager runs
    assert result.verdict == "rejected" and rules(result) & {"monkey-patch", "threads-or-streams"}, result.message
    assert result.failed_stage == "load", result.message
    assert incumbent.read_text() == REDUCE_STARTER.read_text()


def test_trusted_code_is_the_installed_code_not_its_file_name():
    """What counts as Triton's, the standard library's or importlib's own code between the
    compiler's frame and an event: the code its file compiles to, not a code object that only
    names the file (compiled under it, or rebuilt with code.replace)."""
    import importlib._bootstrap_external as bootstrap_external
    import subprocess

    import triton.runtime.cache as cache

    from autokernel.harness.host_reads import TrustedCode

    trusted = TrustedCode()
    assert trusted(subprocess.Popen._execute_child.__code__)
    assert trusted(cache.FileCacheManager.put.__code__)
    assert trusted(bootstrap_external._write_atomic.__code__)  # a .pyc written by a lazy import
    module = compile("def put(self, data, filename, binary=True):\n    return open(filename, 'w')\n",
                     cache.__file__, "exec")
    forged = next(c for c in module.co_consts if type(c) is type(module))
    assert forged.co_filename == cache.__file__ and not trusted(forged)
    rebuilt = (lambda: None).__code__.replace(co_filename=subprocess.__file__, co_name="_execute_child")
    assert not trusted(rebuilt)
    assert not trusted(test_trusted_code_is_the_installed_code_not_its_file_name.__code__)


def test_a_program_set_as_tritons_ptxas_is_not_started(tmp_path):
    """Triton's own code starts the program its settings name as ptxas: a kernel that set
    another one (past the static rules, which refuse assignments to triton, and past the
    setting's environment variable, by writing the knob's own dict) had it started under the
    compiler's exemption.  Tool settings changed since the rule was armed end it."""
    found = _compile_under_the_outside_rule(tmp_path, "ptxas")
    assert found["refused"], found
    rule, what = found["refused"][0]
    assert rule == "threads-or-streams" and "nvidia.ptxas" in what, found


def test_a_refused_paths_file_name_survives_the_messages_width():
    """The refusal cut a path's repr at 80 characters: under pytest-xdist the temporary folder
    grew a ``popen-gw1`` part and the incumbent's file name fell off the message."""
    from autokernel.harness.host_reads import shortened

    path = repr("/tmp/pytest-of-root/pytest-7/popen-gw1/test_a_candidate_cannot_rewrit0/incumbent.py")
    assert len(shortened(path)) == 80 and shortened(path).endswith("incumbent.py'")
    assert shortened(path).startswith("'/tmp/") and shortened("'short'") == "'short'"
