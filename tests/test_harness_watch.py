"""The torch-op watch cannot be escaped from inside the process it runs in: the Triton
interpreter's exemption goes by code object (not file name) and only inside a launch the hook
saw, and a watch that was removed or switched off during the call says so."""
from __future__ import annotations

import os

import pytest
import torch
import triton

from autokernel.harness import launches
from autokernel.harness.watch import records_reader
from autokernel.harness.worker import make_watch_class


@pytest.fixture(scope="module")
def watch_and_reader():
    cls = make_watch_class(launches.LaunchRecord())
    return cls, records_reader(cls)


@pytest.fixture
def watch_cls(watch_and_reader):
    return watch_and_reader[0]


@pytest.fixture
def records_of(watch_and_reader):
    """What the judge reads of a watch (taken once per class, as the worker takes it)."""
    return watch_and_reader[1]


def test_a_frame_compiled_under_the_interpreters_file_name_is_still_watched(watch_cls, records_of):
    where = os.path.join(os.path.dirname(triton.__file__), "runtime", "interpreter.py")
    scope = {"torch": torch}
    exec(compile("def hidden(x):\n    return torch.softmax(x, -1)\n", where, "exec"), scope)
    watch = watch_cls(None)
    with watch:
        scope["hidden"](torch.randn(4, 8))
    assert "aten._softmax" in records_of(watch).ops


def test_the_interpreter_is_known_by_its_code_objects():
    codes = launches.interpreter_code_objects()
    from triton.runtime import interpreter

    assert interpreter.GridExecutor.__call__.__code__ in codes
    fake = compile("def f():\n    pass\n", interpreter.__file__, "exec")
    assert fake not in codes


def test_popping_the_watch_off_the_mode_stack_is_seen(watch_cls):
    watch = watch_cls(None)
    with watch:
        assert watch.still_in_charge() is None
        popped = torch._C._pop_torch_dispatch_stack(None)
        try:
            message = watch.still_in_charge()
        finally:
            torch._C._push_on_torch_dispatch_stack(popped)
    assert message and "removed" in message


def test_excluding_python_dispatch_is_seen(watch_cls):
    watch = watch_cls(None)
    with watch:
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
            message = watch.still_in_charge()
    assert message and "excluded" in message


def test_the_watch_records_what_it_allocated(watch_cls, records_of):
    watch = watch_cls(float("nan"))
    kept = torch.zeros(8)
    with watch:
        fresh = torch.empty(8)
    seen = records_of(watch)
    assert fresh.untyped_storage().data_ptr() in seen.allocated
    assert kept.untyped_storage().data_ptr() not in seen.allocated
    assert torch.isnan(fresh).all()  # poisoned


def test_the_watch_keeps_its_records_out_of_its_own_attributes(watch_cls, records_of):
    """What the judge reads of a watch (ops, allocations, poison, findings) is none of the watch's
    attributes: a kernel that held the watch edited them in place (``watch.ops.discard``)."""
    watch = watch_cls(float("nan"))
    with watch:
        torch.empty(8).sum()
        assert set(vars(watch)) <= {"old_dispatch_mode_flags", "old_non_infra_dispatch_mode_flags",
                                    "old_without_ignore_compile_internals_dispatch_mode_flags"}
    assert "aten.sum" in records_of(watch).ops
    assert records_reader(watch_cls) is None  # handed over once: none for a kernel holding the class
    assert not [name for name in vars(watch_cls) if "record" in name]


def test_a_flag_pushed_onto_the_watchs_saved_flags_is_seen_and_never_reaches_torch(watch_cls, records_of):
    from torch.utils import _python_dispatch

    class Flag:
        def __bool__(self):
            raise AssertionError("the kernel's flag was asked for its truth value")

    watch = watch_cls(None)
    with watch:
        watch.old_dispatch_mode_flags.append(Flag())
        message = watch.still_in_charge()
    assert message and "changed the harness's dispatch mode" in message
    assert "the dispatch-mode flags torch saved on the watch" in records_of(watch).tampered
    assert type(_python_dispatch._is_in_torch_dispatch_mode) is bool


def test_watches_made_by_a_kernel_cannot_push_the_judges_records_out_unseen(watch_cls, records_of):
    watch = watch_cls(None)
    with watch:
        made = [watch_cls(None) for _ in range(40)]  # never entered: all kept but the latest few
        message = watch.still_in_charge()
    assert message and "pushed out" in message and len(made) == 40
