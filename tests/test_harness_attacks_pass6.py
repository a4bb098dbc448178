"""Sixth red-team pass on the judge (CPU, Triton interpreter): each attack file in
tests/attacks/ passed ``autokernel bench`` before its fix; each test here failed before it."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autokernel.harness import Evaluator, integrity

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS, no_static_checks, rules  # noqa: E402,F401  (a fixture among them)
from test_harness_integrity import rules as static_rules  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")


def test_a_class_claiming_a_triton_module_is_no_triton_launch_argument(no_static_checks):
    """A duck-typed tensor whose class set ``__module__ = "triton.language.core"`` was taken for
    a Triton object at launch; the interpreter called its storage's ``.cpu`` (torch.softmax) in
    its own exempt frames (passed all six stages).  A Triton class is now the object its real
    module holds under its name."""
    with Evaluator("softmax", device="cpu", shapes=["4x100"], dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(ATTACKS / "softmax_interp_triton_module_duck.py")
    # foreign-compute for the argument; torch-op too since the interpreter's frames exempt only
    # its copies (test_a_storage_class_swapped_during_the_call_...); whichever the judge reports first
    assert result.verdict == "rejected" and rules(result) & {"foreign-compute", "torch-op"}, result.message
    assert result.failed_stage == "smoke", result.message


def test_triton_classes_are_told_by_identity_not_by_the_module_they_name():
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    from autokernel.harness.launches import is_triton_class

    class Posing:
        __module__ = "triton.language.core"

    Posing.__qualname__ = "constexpr"  # names a real Triton class: still not that class

    class Sub(tl.constexpr):
        pass

    assert is_triton_class(type(tl.constexpr(3))) and is_triton_class(type(tl.float32))
    assert is_triton_class(TensorDescriptor)
    assert not is_triton_class(Posing) and not is_triton_class(Sub)


def test_a_class_body_naming_another_module_is_a_static_finding():
    source = (ATTACKS / "softmax_interp_triton_module_duck.py").read_text()
    assert "introspection" in static_rules(source)


def test_a_pre_run_hook_the_interpreter_calls_is_watched():
    """``torch.sum`` added as a pre-run hook of the file's kernel: the interpreter's
    ``GridExecutor.__call__`` called it with the launch's arguments (``torch.sum(x, -1,
    out=out)``), a C function with no frame of the file's on the stack, and the watch exempted
    every frame of the interpreter (passed all six stages, the kernel body empty).  Only the
    interpreter's argument copies are exempt now."""
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=30, timing=False) as ev:
        result = ev.evaluate(ATTACKS / "reduce_pre_run_hook_sum.py")
    assert result.verdict == "rejected" and "torch-op" in rules(result), result.message
    assert "aten.sum" in result.message and result.failed_stage == "smoke", result.message


def test_a_storage_class_swapped_during_the_call_cannot_compute_in_the_interpreters_copy():
    """The storage class's ``cpu`` swapped during the call (through a local alias) for
    ``functools.partial(torch.softmax, x, -1)`` and put back before the call returned: the
    interpreter's argument copy, an exempt frame, computed the softmax as the output's host
    copy and wrote it back (passed all six stages, the kernel body empty).  Only the copy's own
    ops are exempt in those frames now."""
    with Evaluator("softmax", device="cpu", shapes=["4x100"], dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(ATTACKS / "softmax_storage_class_swapped_in_call.py")
    assert result.verdict == "rejected" and "torch-op" in rules(result), result.message
    assert "aten._softmax" in result.message and result.failed_stage == "smoke", result.message


def test_the_watchs_poison_fill_runs_no_method_the_kernel_set_on_the_class():
    """``fill_`` set on the tensor class for the length of the call (through a local alias):
    the watch's ``out.fill_(poison)``, inside ``__torch_dispatch__`` where the watch is off
    torch's stack, ran it, and it wrote torch.softmax into the output unrecorded, then removed
    itself (passed all six stages).  The watch calls C functions now: the output stays poisoned."""
    with Evaluator("softmax", device="cpu", shapes=["4x100"], dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(ATTACKS / "softmax_poison_fill_swapped.py")
    assert result.verdict == "rejected" and "partial-write" in rules(result), result.message
    assert result.failed_stage == "smoke", result.message


def test_a_triton_body_that_calls_python_is_a_static_finding():
    """The interpreter runs a ``@triton.jit`` body as Python: a body that handed each loaded
    value's bits to a plain function of the file's (``math.fsum`` of the row) passed all six
    stages on the CPU (Triton would not compile it).  Calls from a Triton body to Python of the
    file's or of other modules, and writes from it into names outside it, are findings; the
    shipped starters have none."""
    from autokernel.problems.registry import KERNELS_DIR

    assert "foreign-compute" in static_rules((ATTACKS / "reduce_interp_body_python.py").read_text())
    sink = ("import triton\nimport triton.language as tl\n_SINK = [0]\n\n\n@triton.jit\ndef k(x_ptr):\n"
            "    _SINK[0] = tl.load(x_ptr)\n")
    assert "foreign-compute" in static_rules(sink)
    via_module = ("import math\nimport triton\n\n\n@triton.jit\ndef k(x_ptr):\n    y = math.fsum([x_ptr])\n")
    assert "foreign-compute" in static_rules(via_module)
    # the same through builtins alone: the bits read with int(), decoded and summed in Python
    bits = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x_ptr, B: tl.constexpr):\n"
            "    b = int(tl.load(x_ptr).to(tl.int32, bitcast=True)) + int(B) + float('-inf')\n")
    assert "foreign-compute" in static_rules(bits)
    honest = ("import triton\nimport triton.language as tl\n_EXP = tl.exp\nBLOCK = 128\n\n\n@triton.jit\n"
              "def _helper(x):\n    return _EXP(x) + 1\n\n\n@triton.jit\ndef k(x_ptr, y_ptr, n, B: tl.constexpr):\n"
              "    offs = tl.arange(0, B)\n    acc = tl.zeros((B,), tl.float32)\n    acc += _helper(tl.load(x_ptr + offs))\n"
              "    tl.store(y_ptr + offs, acc, mask=offs < n)\n")
    assert static_rules(honest) == set()
    for starter in sorted(KERNELS_DIR.glob("*.py")):
        found = [f.message for f in integrity.static_findings(starter.read_text()) if "the Triton kernel" in f.message]
        assert not found, (starter.name, found)


def test_a_tensor_descriptors_tensor_with_planted_attributes_is_no_plain_argument():
    """The interpreter copies a TensorDescriptor's ``base`` as it copies a tensor argument (its
    storage's ``cpu`` in the exempt copy frames): a base with attributes planted on it is as
    odd an argument as such a tensor passed directly."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from autokernel.harness.launches import odd_argument

    clean = torch.zeros(16, 16)
    planted = torch.zeros(16, 16)
    planted.untyped_storage = clean.untyped_storage
    assert odd_argument((TensorDescriptor.from_tensor(clean, [16, 16]),), {}) is None
    assert odd_argument((TensorDescriptor.from_tensor(planted, [16, 16]),), {}) is not None


# the same file setting its siblings' resource limits instead (RLIMIT_CPU would kill the incumbent)
PRLIMIT = ("os.setpriority(os.PRIO_PROCESS, pid, 19)", "resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))")


# or signalling them through a pid file descriptor (no audit event either; signal 0 here)
PIDFD = ("os.setpriority(os.PRIO_PROCESS, pid, 19)", "signal.pidfd_send_signal(os.open(f'/proc/{pid}', os.O_RDONLY), 0)")


@pytest.mark.parametrize("edit,said", [(None, "setpriority"), (PRLIMIT, "prlimit"), (PIDFD, "pidfd_send_signal")])
def test_a_candidate_cannot_renice_the_incumbents_worker(tmp_path, no_static_checks, edit, said):
    """Each call, the honest row sums' file lowered the CPU priority of its worker's siblings
    (the incumbent's worker among them) to 19 with ``os.setpriority``, which raises no audit
    event (passed; on a loaded host the incumbent is the slower in keep/revert, the wall clock
    agreeing).  Calls on another process's scheduling or limits are refused and reported."""
    from autokernel.problems.registry import KERNELS_DIR

    attack = tmp_path / "renice.py"
    text = (ATTACKS / "reduce_renice_incumbent.py").read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1]).replace("import os\n", "import os\nimport resource\nimport signal\n", 1)
    attack.write_text(text)
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=30, baselines=False,
                   writable=[tmp_path]) as ev:  # where it notes whom it reniced
        result = ev.evaluate(attack, incumbent_file=KERNELS_DIR / "reduce.py")
    assert result.verdict == "rejected" and "threads-or-streams" in rules(result), result.message
    assert said in result.message, result.message
    assert not Path(str(attack) + ".reniced").exists()


def test_reaching_other_processes_without_a_signal_is_a_static_finding():
    assert "threads-or-streams" in static_rules((ATTACKS / "reduce_renice_incumbent.py").read_text())
    assert "threads-or-streams" in static_rules("import resource\n")
    assert "threads-or-streams" in static_rules("import os\n_o = os\n_o.sched_setaffinity(1, {0})\n")


def test_the_watch_calls_ops_through_their_c_handles(no_static_checks):
    """The op class (a key of torch.utils.flop_counter's registry is an op packet, its
    ``.default`` an OpOverload) had its ``__call__`` swapped for the length of the call: the
    watch's ``func(*args)`` for ``y.view(...)`` ran the kernel's function inside
    ``__torch_dispatch__``, where the watch is off torch's stack, and it wrote torch.softmax
    into the output (passed all six stages).  The watch calls each op's C handle now and
    reports the swap."""
    with Evaluator("softmax", device="cpu", shapes=["4x100"], dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(ATTACKS / "softmax_op_call_swapped.py")
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "__call__" in result.message and result.failed_stage == "smoke", result.message


def test_assigning_a_protocol_method_on_an_object_is_a_static_finding():
    assert "introspection" in static_rules((ATTACKS / "softmax_op_call_swapped.py").read_text())
    assert "introspection" in static_rules("def f(x):\n    c = type(x)\n    c.__getattr__ = f\n")


def test_the_watch_names_ops_by_their_schema_not_by_what_the_packet_says(no_static_checks):
    """``_qualified_op_name`` of aten.mm's packet (a key of torch.utils.flop_counter's registry)
    set to "aten::view" for the length of the call: the watch named ops by ``str()`` of their
    packet, so torch.mm was recorded as ``aten.view`` and allowed (passed all six stages).  The
    name comes from the op's schema through the schema class's C getter now."""
    with Evaluator("matmul", device="cpu", shapes=["16x16x16"], dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(ATTACKS / "matmul_op_renamed.py")
    assert result.verdict == "rejected" and "torch-op" in rules(result), result.message
    assert "aten.mm" in result.message and result.failed_stage == "smoke", result.message


def test_an_op_given_an_allowed_ops_schema_is_not_that_op(no_static_checks):
    """aten.mm's op given aten.view's schema for the length of the call (both reachable through
    torch.utils.flop_counter's ``aten``): named by its schema, torch.mm passed as aten.view.  An
    op named as an allowed one must be that op's own object, taken before the kernel loaded."""
    with Evaluator("matmul", device="cpu", shapes=["16x16x16"], dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(ATTACKS / "matmul_schema_swapped.py")
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "aten.view" in result.message and result.failed_stage == "smoke", result.message
