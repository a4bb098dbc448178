"""Eighth pass, second part, on the judge (CPU, Triton interpreter): the judge's records within
a kernel's reach, edited in place (the audit hook's record of ``__code__`` sets, the watch's own
records), and the streams the judge's work writes through.  Each attack
file in tests/attacks/ passed the judge before its fix (with the static checks off, as a file
that slipped past them would meet it); each test here failed before it."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import judge_attack, no_static_checks, rules  # noqa: E402,F401  (a fixture)

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")


def test_a_code_swap_hidden_by_forging_the_audit_record_in_place_is_caught(no_static_checks, tmp_path):
    """The judge's draw helper given stashing code, then the audit hook's record edited in place
    (its entry for the helper replaced with a decoy's): the record kept the length the check
    expected and named no function of the judge's (passed all six stages).  The record is in the
    hook's closure now; the judge reads it through the reader it took before the kernel loaded."""
    result = judge_attack(tmp_path, "reduce_code_set_record_forged.py")
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "randn" in result.message and result.failed_stage == "smoke", result.message


def test_the_record_of_code_sets_is_no_name_of_the_module():
    from autokernel.harness import host_reads

    assert not hasattr(host_reads, "CODE_SETS")
    assert not [name for name, value in vars(host_reads).items() if type(value) is list
                and any(type(e) is tuple and len(e) == 2 and type(e[1]).__name__ == "code" for e in value)]


def test_a_stream_of_the_kernels_with_every_warning_shown_is_caught(no_static_checks, tmp_path):
    """``warnings.simplefilter("always")`` and an object of the file's own as ``sys.stderr``, set
    at import: the warning and exception hooks stayed the judge's, but they write to whatever
    ``sys.stderr`` is, so any warning in the judge's work would run the file's ``write`` (passed
    all six stages: neither was compared).  Both are compared with the hooks now."""
    result = judge_attack(tmp_path, "reduce_stderr_warnings_always.py", timing=False)
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "sys.stdout or sys.stderr" in result.message and result.failed_stage == "smoke", result.message


@pytest.mark.parametrize("change", ["stderr", "stdout", "filter"])
def test_a_stream_left_changed_by_a_call_is_a_changed_hook_and_a_warning_filter_is_not(change):
    """A filter alone writes nothing the stream check does not cover, and libraries add filters
    as their modules import (which a first launch on a GPU can do): comparing them would risk
    rejecting honest kernels."""
    import warnings

    from autokernel.harness import hooks

    class Stream:
        def write(self, text):
            return len(text)

    before = hooks.outside_hooks()
    saved = (sys.stdout, sys.stderr)
    filters = warnings.filters[:]
    try:
        if change == "stderr":
            sys.stderr = Stream()
        elif change == "stdout":
            sys.stdout = Stream()
        else:
            warnings.simplefilter("always")
        expected = None if change == "filter" else "sys.stdout or sys.stderr"
        assert hooks.changed_hooks(before, hooks.outside_hooks()) == expected
    finally:
        sys.stdout, sys.stderr = saved
        warnings.filters[:] = filters
    assert hooks.changed_hooks(before, hooks.outside_hooks()) is None


@pytest.mark.parametrize("edit", ["ops", "flags"])
def test_the_watchs_records_edited_in_place_are_no_way_past_it(no_static_checks, tmp_path, edit):
    """The watch from torch's dispatch stack, its records edited in place during the call: the op
    names it saw (``aten.sum`` discarded from its set), or the flags torch's base class saved on
    it (an object of the file's own pushed on top: the judge's ``__exit__`` popped it into torch's
    module globals, and the next entry of any mode asked for its truth value, where it ran
    ``torch.sum`` on the next call's input, unwatched).  Both passed all six stages; the check
    after the call compared the names of the watch's attributes only.  The records are kept out
    of the watch now, and torch's saved flags are compared and put back."""
    result = judge_attack(tmp_path, "reduce_watch_records_edited.py", ('EDIT = "ops"', f'EDIT = "{edit}"'),
                          timing=False)
    assert result.verdict == "rejected" and "torch-op" in rules(result), result.message
    assert result.failed_stage == "smoke", result.message
    if edit == "ops":
        assert "aten.sum" in result.message, result.message
    else:
        assert "changed the harness's dispatch mode" in result.message, result.message
