"""The worker -> judge channel carries plain data only: nothing the candidate made can run in
the judge when the answer is decoded."""
from __future__ import annotations

import os
import pickle

import pytest

from autokernel.harness import transport


class _Evil:
    def __init__(self, call):
        self.call = call

    def __reduce__(self):
        return self.call


class _Text(str):
    pass


def test_plain_answers_round_trip():
    reply = {"times_us": [1.5, 2.0], "ops": ["aten.empty"], "bad": [None, "output is a list"],
             "nested": {"k": (1, True, b"raw")}}
    assert transport.decode(transport.encode(reply)) == reply


@pytest.mark.parametrize("call", [
    (eval, ("1 + 1",)),
    (os.system, ("true",)),
    (print, ("reached the judge",)),
])
def test_a_pickle_that_names_a_callable_is_refused_before_it_runs(call, capsys):
    data = pickle.dumps({"outs": [_Evil(call)]})
    with pytest.raises(pickle.UnpicklingError, match="refused global"):
        transport.decode(data)
    assert "reached the judge" not in capsys.readouterr().out


def test_torch_objects_are_refused_too():
    torch = pytest.importorskip("torch")
    with pytest.raises(pickle.UnpicklingError):
        transport.decode(pickle.dumps({"outs": [torch.ones(3)]}))


@pytest.mark.parametrize("value", [_Text("x"), {1: "int key"}, {"x": {1, 2}}, object()])
def test_encode_accepts_plain_types_only(value):
    with pytest.raises((transport.NotPlainData, pickle.PicklingError, TypeError)):
        transport.encode(value)


def test_a_subclass_of_a_plain_type_does_not_decode():
    with pytest.raises(pickle.UnpicklingError):
        transport.decode(pickle.dumps([_Text("looks like a string")]))
