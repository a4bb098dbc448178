"""The profiler's marked functions reached through a decorated method of a patched class."""
from __future__ import annotations

import functools
import types

import torch
import torch.nn as nn

from autokernel.profiler import Tracer


def apply_rotary_pos_emb(q):  # a marked name (profiler.MARKED_FUNCTIONS)
    return q * 2


def _forward(self, x):
    return apply_rotary_pos_emb(x)


def test_marked_function_under_a_decorated_forward_with_its_own_globals():
    """hf:cohere2 after apply: its attention's rewritten forward has globals of its own, under
    transformers' ``deprecate_kwarg`` wrapper (globals of transformers.utils.deprecation), so the
    tracer never wrapped its ``apply_rotary_pos_emb``: verify's breakdown put rotary_interleaved
    at 0 us after, its ops (stack, mul, add) counted as not covered."""
    own = {"__name__": "rebound_for_test", "apply_rotary_pos_emb": apply_rotary_pos_emb}
    inner = types.FunctionType(_forward.__code__, own, "forward")

    @functools.wraps(inner)
    def forward(self, x):  # defined here: its globals are this test module's, which has no forward
        return inner(self, x)

    Layer = type("Layer", (nn.Module,), {"forward": forward})
    with Tracer(Layer()) as tracer:
        model = tracer.model
        model(torch.ones(2))
    assert [c.name for c in tracer.calls if c.kind == "function"] == ["rebound_for_test.apply_rotary_pos_emb"]
    assert own["apply_rotary_pos_emb"] is apply_rotary_pos_emb  # put back on exit
