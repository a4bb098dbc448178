"""A problem from the spec a request names (worker side and CLI)."""
from __future__ import annotations

from typing import Any


def load_problem(spec: Any):
    """A problem from a spec: a built-in kind, a problem file path, or ``package.module:factory``
    (a Python import path of a function returning a Problem; used by tests and tools)."""
    from ..problems.base import Problem
    from ..problems.registry import get_problem

    if isinstance(spec, Problem):
        return spec
    text = str(spec)
    module_name, sep, attr = text.partition(":")
    if sep and attr.isidentifier() and all(part.isidentifier() for part in module_name.split(".")):
        import importlib

        return getattr(importlib.import_module(module_name), attr)()
    return get_problem(text)


def draw_set(make_inputs: Any, adversarial_inputs: Any, shape: dict, dtype: Any, device: str, seed: Any) -> tuple:
    """One timed call's input set, the same in the worker and in the judge: ``seed`` an int
    draws ``make_inputs``; ``[seed, k]`` draws variant ``k`` of the problem's numerics cases
    (``adversarial_inputs``: large, tiny, NaN... values), which timed calls get too, so that a
    kernel cannot keep the code paths that handle them for the calls it takes for correctness
    checks."""
    if isinstance(seed, (list, tuple)):
        from ..problems.base import STANDARD_VARIANTS, only_variant

        index = int(seed[1])
        if 0 <= index < STANDARD_VARIANTS:
            with only_variant(index):  # the other variants are not built (the same values: base.only_variant)
                cases = adversarial_inputs(dict(shape), dtype, device, int(seed[0]))
        else:
            cases = adversarial_inputs(dict(shape), dtype, device, int(seed[0]))
        return tuple(cases[index % len(cases)][1])
    return tuple(make_inputs(dict(shape), dtype, device, int(seed)))
