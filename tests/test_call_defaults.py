"""A rotary function's call reaches the op only with the arguments the function was probed with:
its first ones, and the rest at their defaults (``calls.defaults_only``)."""
from __future__ import annotations

from autokernel.integrate.calls import defaults_only


def apply_rotary(q, k, cos, sin, unsqueeze_dim=1, position_ids=None, *, scale=1.0):
    return q, k


def test_arguments_at_their_defaults_are_taken_by_position_or_by_name():
    taken = defaults_only(apply_rotary, 4)
    assert taken((), {})
    assert taken((), {"unsqueeze_dim": 1})  # ModernBERT's call
    assert taken((1, None), {"scale": 1.0})


def test_any_other_value_or_an_unknown_argument_goes_back_to_the_function():
    taken = defaults_only(apply_rotary, 4)
    assert not taken((), {"unsqueeze_dim": 2})
    assert not taken((True,), {})  # True == 1, but not the default's type
    assert not taken((1, None, 3.0), {})  # more positional arguments than it has
    assert not taken((), {"layout": "bshd"})
    assert not taken((), {"position_ids": object()})


def test_a_signature_that_takes_anything_takes_only_calls_without_extra_arguments():
    def wrapper(*args, **kwargs):
        return args
    taken = defaults_only(wrapper, 4)
    assert taken((), {}) and not taken((), {"unsqueeze_dim": 1})
