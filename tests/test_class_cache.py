"""The classes ``apply`` makes are kept by a key and shared by the modules that switch alike; a
kept class is reused only where what its members hold is what the applier asks for now
(``integrate/class_cache.py``)."""
from __future__ import annotations

import torch
import torch.nn as nn

from autokernel.integrate.class_cache import kept_class, same_held
from autokernel.integrate.patching import _swap_base_forward, _swap_class


def _scaling_forward(width):
    def forward(self, x):
        return x * width
    return forward


class _Scaled(nn.Module):
    def forward(self, x):
        return x


def test_a_key_that_leaves_out_what_the_forward_holds_still_gives_each_module_its_own_forward():
    """Before: the class made for the first module was reused for the second under the same key,
    and the second module computed with the first one's width (the bug of five appliers whose keys
    left out a width or the shapes their op was judged on)."""
    first, second, third = _Scaled(), _Scaled(), _Scaled()
    _swap_class(first, ("scale",), {"forward": _scaling_forward(2)})
    _swap_class(second, ("scale",), {"forward": _scaling_forward(3)})
    _swap_class(third, ("scale",), {"forward": _scaling_forward(2)})
    x = torch.ones(2)
    assert first(x).tolist() == [2, 2] and second(x).tolist() == [3, 3]
    assert type(first) is type(third) and type(first) is not type(second)  # alike modules share one class


def test_a_base_forward_switched_under_one_key_is_kept_by_what_it_holds_too():
    class Outer(_Scaled):
        def forward(self, x):
            return super().forward(x) + 1

    a, b = Outer(), Outer()
    _swap_base_forward(a, ("scale",), _Scaled, {"forward": _scaling_forward(2)})
    _swap_base_forward(b, ("scale",), _Scaled, {"forward": _scaling_forward(5)})
    assert a(torch.ones(1)).item() == 3 and b(torch.ones(1)).item() == 6


def test_rewritten_forwards_are_told_apart_by_the_helpers_their_own_globals_hold():
    source = "def forward(self, x):\n    return HELPER(x)\n"

    def compiled(helper):
        scope = {"HELPER": helper}
        exec(compile(source, "<rewritten>", "exec"), scope)
        return scope["forward"]

    def helper_adding(n):
        return lambda x: x + n

    one = helper_adding(1)
    assert same_held(compiled(one), compiled(one))
    assert not same_held(compiled(one), compiled(helper_adding(2)))
    assert same_held(compiled(helper_adding(1)), compiled(helper_adding(1)))  # the same code, equal cells


def test_values_are_compared_by_value_and_tensors_and_modules_only_as_the_same_object():
    t = torch.ones(2)
    assert same_held((1, 2.0, "a", torch.float16), (1, 2.0, "a", torch.float16))
    assert not same_held({"D": 64}, {"D": 128})
    assert same_held(t, t) and not same_held(t, torch.ones(2))
    assert not same_held(nn.Linear(2, 2), nn.Linear(2, 2))


def test_one_class_is_made_for_members_that_hold_alike():
    made = []

    def make():
        made.append(type("Made", (), {}))
        return made[-1]

    members = {"forward": _scaling_forward(7), "width": 7}
    key = ("test_one_class", object())
    assert kept_class(key, members, make) is kept_class(key, {"forward": _scaling_forward(7), "width": 7}, make)
    assert kept_class(key, {"forward": _scaling_forward(7), "width": 8}, make) is not made[0]
    assert len(made) == 2
