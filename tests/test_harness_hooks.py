"""hooks.py: the snapshot of what would run a kernel's code outside its call, and its comparison
(by identity, one pass in C over tuples of the same objects, elementwise otherwise)."""
from __future__ import annotations

import signal

from autokernel.harness import hooks


def test_a_signal_handler_or_an_interval_timer_set_and_put_back_is_seen_then_not():
    before = hooks.outside_hooks()
    assert hooks.changed_hooks(before, hooks.outside_hooks()) is None
    old = signal.signal(signal.SIGUSR1, lambda *a: None)
    try:
        assert hooks.changed_hooks(before, hooks.outside_hooks()) == "a signal handler or interval timer"
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert hooks.changed_hooks(before, hooks.outside_hooks()) is None
    signal.setitimer(signal.ITIMER_VIRTUAL, 1000.0)
    try:
        assert hooks.changed_hooks(before, hooks.outside_hooks()) == "a signal handler or interval timer"
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    assert hooks.changed_hooks(before, hooks.outside_hooks()) is None


def test_same_is_identity_for_objects_and_equality_for_plain_values_only():
    class Equal:
        def __eq__(self, other):  # a kernel's object that claims to equal anything: never asked
            raise AssertionError("__eq__ ran")

    one, other = Equal(), Equal()
    assert hooks.same((one, (1, 2.0, "x")), (one, (1, 2.0, "x")))
    assert not hooks.same((one,), (other,))
    assert not hooks.same((one, (1, 2.0)), (one, (1, 2.5)))
    assert not hooks.same((1,), (1, 1)) and not hooks.same((1,), [1])
    assert not hooks.same(1, 1.0) and not hooks.same(True, 1)
