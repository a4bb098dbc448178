"""Seventh red-team pass on the judge (CPU, Triton interpreter), on the collector being off in
the worker, the audit hook's record of ``__code__`` sets and the hooks compared by identity:
each attack file in tests/attacks/ passed ``autokernel bench`` before its fix (all but
reduce_draw_code_swap_unseen.py with the static checks on); each test here failed before it."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autokernel.harness import Evaluator

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS, judge_attack, no_static_checks, rules  # noqa: E402,F401  (a fixture)
from test_harness_integrity import rules as static_rules  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")


def test_a_collector_switched_on_and_off_again_by_its_own_finalizer_is_caught(tmp_path, no_static_checks):
    """The collector reached as ``triton.testing.gc``, switched on, its youngest generation filled
    to the threshold: the first container the judge's name check allocated after the call started
    a collection, whose finalizer computed the row sums (untimed, 20-30x the starter's speed) and
    switched the collector off again before the judge asked whether it was on.  Every collection
    the judge did not make itself is counted now (the interpreter's own counters)."""
    source = (ATTACKS / "reduce_gc_reenabled_undone.py").read_text()
    # it met the run-time checks with the static ones on; since the eleventh pass ``triton.testing.gc``
    # is a static finding too (tests/test_harness_attacks_pass11.py), so they are off here
    result = judge_attack(tmp_path, "reduce_gc_reenabled_undone.py", timing=False)
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "garbage collect" in result.message and result.failed_stage == "smoke", result.message


def test_a_finalizer_left_in_the_judges_watch_is_caught(no_static_checks, tmp_path):
    """A suspended generator put in the watch's own set of pointers (the watch from torch's
    dispatch stack, through a local alias of torch): the watch, a local of the judge's call, was
    freed as that call returned and the generator's ``finally`` computed the row sums there,
    outside the timer, the watch and the launch record, before the output's digest (passed all
    six stages with the static checks on, ~40x the starter's speed).  The judge frees its
    watches and launch records at the end of the request, where any Python that runs is the
    kernel's.  Since the eighth pass the watch holds no set of its own (its records are out of
    the kernel's reach) and the file's fallback, an attribute of its own on the watch holding the
    generator, is seen by the check after the call first; the release under the profile still
    runs the generator's ``finally`` there and reports it (``reduce_retired_output_finalizer.py``
    is caught by that release alone)."""
    result = judge_attack(tmp_path, "reduce_watch_finalizer.py", timing=False)
    assert result.verdict == "rejected" and "torch-op" in rules(result), result.message
    assert "changed the harness's dispatch mode" in result.message and result.failed_stage == "smoke", \
        result.message


def test_private_torch_apis_through_a_local_alias_of_torch_are_static_findings():
    """The static rules on private torch APIs went by the names the file's imports bound: ``_torch
    = torch`` then ``_torch._C._get_dispatch_stack_at`` reached the judge's watch unseen."""
    assert "torch-op" in static_rules((ATTACKS / "reduce_watch_finalizer.py").read_text())
    assert "torch-op" in static_rules("import torch\nt = torch\nc = t._C\n")
    assert "monkey-patch" in static_rules("import torch\nt = torch\nt.randn = len\n")
    assert static_rules("import torch\nfloat32 = torch.float32\nx = torch.empty(3, dtype=float32)\n") == set()


def test_the_unguarded_process_calls_are_not_handed_out_by_the_guards_defaults(tmp_path):
    """The guard on ``os.setpriority`` kept the real function as a keyword default: ``getattr(os,
    "setpriority").__kwdefaults__["_original"]`` reniced the incumbent's worker (static checks
    passed).  The guards keep their originals in closures now, and reading a function's defaults
    is a static finding."""
    from autokernel.problems.registry import KERNELS_DIR

    attack = tmp_path / "renice.py"
    attack.write_text((ATTACKS / "reduce_renice_through_defaults.py").read_text())
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=30, baselines=False,
                   writable=[tmp_path]) as ev:  # where it notes whom it reniced
        ev.evaluate(attack, incumbent_file=KERNELS_DIR / "reduce.py")
    assert not Path(str(attack) + ".reniced").exists()
    assert "introspection" in static_rules(attack.read_text())
    assert "threads-or-streams" in static_rules('import os\nf = getattr(os, "setpriority")\n')


def test_the_guards_hold_no_original_in_their_defaults():
    import os
    import signal

    import triton
    from triton.runtime.interpreter import InterpretedFunction

    from autokernel.harness import host_reads, launches

    host_reads._guard_other_processes([])
    launches.install()
    guarded = [getattr(os, name) for name in host_reads.OTHER_PROCESS_CALLS if hasattr(os, name)]
    guarded += [signal.pidfd_send_signal] if hasattr(signal, "pidfd_send_signal") else []
    wrappers = guarded + [triton.runtime.jit.JITFunction.run, InterpretedFunction.run]
    assert wrappers and all(type(f).__name__ == "function" for f in wrappers)
    assert all(not f.__defaults__ and not f.__kwdefaults__ for f in wrappers)


@pytest.mark.parametrize("hide", ["record-rebound", "all-shadowed", "method"])
def test_a_code_swap_hidden_from_the_audit_record_is_caught(no_static_checks, tmp_path, hide):
    """The judge's draw helper given stashing code, with the audit hook's record rebound to a
    fresh list at import (the hook looked the list up by name, the check held the old one), or
    with ``all`` added to the globals of the module that checks the record (a new name: nothing
    compared it); or the worker's own draw method given that code (a method is no baseline name,
    and the check compared the baseline's functions only): each passed all six stages."""
    result = judge_attack(tmp_path, "reduce_draw_code_swap_unseen.py", ('HIDE = "record-rebound"', f'HIDE = "{hide}"'))
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    if hide != "all-shadowed":
        assert ("randn" if hide == "record-rebound" else "_State._draw") in result.message, result.message
        assert result.failed_stage == "smoke", result.message
    else:  # seen as the file loads
        assert "integrity.all (shadowing the builtin)" in result.message, result.message


def test_a_global_of_a_torch_module_the_digest_ran_through_is_no_way_in(tmp_path, no_static_checks):
    """``torch.autograd.grad_mode.torch`` bound to a stand-in during the call (a module no name
    check compares; static checks passed): the worker's digest of the output, right after the
    call, ran ``torch.no_grad()``, whose ``is_grad_enabled`` was the kernel's and computed the row
    sums there (passed all six stages, ~35x the starter's speed).  The digest runs no Python of
    torch's now: the kernel's stand-in is never called and its unwritten outputs are wrong."""
    source = (ATTACKS / "reduce_grad_mode_global.py").read_text()
    # static checks off: since the eleventh pass ``_grad_mode.torch`` is a static finding (pass 11's tests)
    result = judge_attack(tmp_path, "reduce_grad_mode_global.py", timing=False)
    assert result.verdict != "pass" and result.failed_stage == "smoke", result.message


def test_the_checks_after_a_call_run_no_python_outside_the_judge():
    """What the worker runs between a call's return and its digest (the output checks, the
    digest, the storages' spans) calls C functions and the judge's own code only: Python of any
    other module looks names up in globals no check compares."""
    import torch

    from autokernel.harness.output_checks import check_outputs, output_digest, planted, span

    out = torch.randn(5, 7).sum(-1)
    ran: set[str] = set()

    def profile(frame, event, arg):
        if event == "call" and "autokernel" not in frame.f_code.co_filename:
            ran.add(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        check_outputs((out,), [((5,), "torch.float32")], "cpu")
        output_digest((out,))
        planted((out,))
        span(out)
    finally:
        sys.setprofile(None)
    assert not ran, sorted(ran)


@pytest.mark.parametrize("push_back", ["own", "base"])
def test_a_watch_popped_and_pushed_back_during_the_call_is_caught(no_static_checks, tmp_path, push_back):
    """The watch popped off torch's dispatch stack (``_through(torch)._C._pop_torch_dispatch_stack``),
    ``torch.sum`` into an output allocated under it, the watch pushed back with ``__enter__``: it
    was the top of the stack again when the call returned, and saw no op (passed all six stages,
    static checks on).  The watch counts its entries out of the kernel's reach now."""
    result = judge_attack(tmp_path, "reduce_watch_popped.py", ('PUSH_BACK = "own"', f'PUSH_BACK = "{push_back}"'),
                          timing=False)
    assert result.verdict == "rejected" and "torch-op" in rules(result), result.message
    assert "taken off torch's dispatch stack" in result.message and result.failed_stage == "smoke", result.message


def test_the_dispatch_mode_stacks_are_static_findings_under_any_name():
    assert "torch-op" in static_rules((ATTACKS / "reduce_watch_popped.py").read_text())
    assert "torch-op" in static_rules("import torch\ndef f(m):\n    return m._get_dispatch_stack_at(0)\n")


def test_a_finalizer_planted_on_an_earlier_output_is_caught(tmp_path):
    """A generator planted on the previous call's output during the next call (attributes are
    checked on a call's own tensors only), the file's own reference let go: the judge's release
    of its oldest outputs and of the previous request's inputs ran the generator's ``finally`` at
    the start of a request, before its first draw, unwatched (a Triton launch there went
    unrecorded; passed).  Freeing them runs no Python now without a finding."""
    source = (ATTACKS / "reduce_retired_output_finalizer.py").read_text()
    assert static_rules(source) == set()
    result = judge_attack(tmp_path, "reduce_retired_output_finalizer.py")
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "when the judge freed" in result.message, result.message


def test_a_hook_table_of_the_kernels_class_runs_nothing_in_the_hook_check(tmp_path):
    """``torch.nn.modules.module._global_forward_hooks`` bound to a dict of the kernel's class (a
    table is no callable: no name check compares it), whose ``__iter__`` computed the row sums
    when the judge's hook check after the call read the table's keys (passed all six stages,
    static checks on).  The check compares the tables it took before the kernel loaded, read
    through ``dict.items``, and whether their names still hold them."""
    source = (ATTACKS / "reduce_hook_table_iter.py").read_text()
    assert static_rules(source) == set()
    result = judge_attack(tmp_path, "reduce_hook_table_iter.py", timing=False)
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "torch.nn global module hook" in result.message, result.message


def test_a_hook_replaced_under_its_key_is_a_changed_hook():
    import torch  # noqa: F401

    from autokernel.harness import hooks

    module = sys.modules["torch.nn.modules.module"]
    before = hooks.outside_hooks()
    handle = module.register_module_forward_hook(lambda *args: None)
    try:
        added = hooks.outside_hooks()
        table = module._global_forward_hooks
        table[handle.id] = lambda *args: None  # another function under the same key
        assert hooks.changed_hooks(before, added) == hooks.changed_hooks(before, hooks.outside_hooks()) \
            == "a torch.nn global module hook"
        assert hooks.changed_hooks(added, hooks.outside_hooks()) == "a torch.nn global module hook"
    finally:
        handle.remove()
    assert hooks.changed_hooks(before, hooks.outside_hooks()) is None


def test_a_function_of_torch_C_rebound_for_the_length_of_the_call_is_caught(tmp_path):
    """``torch._C._dispatch_tls_is_dispatch_key_excluded`` rebound during the call (``torch._C``
    through ``_through(torch)``; static checks passed): the watch's own check after the call
    looked it up and ran the kernel's row sums there, untimed, and the function put the original
    back (passed all six stages).  The watch calls the function it took when it was made, and
    ``torch._C``'s names are among those compared right after every call."""
    source = (ATTACKS / "reduce_torch_c_rebound.py").read_text()
    assert static_rules(source) == set()
    result = judge_attack(tmp_path, "reduce_torch_c_rebound.py", timing=False)
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "torch._C._dispatch_tls_is_dispatch_key_excluded" in result.message, result.message
