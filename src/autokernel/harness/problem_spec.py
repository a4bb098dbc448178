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
        return uniform_metadata(tuple(cases[index % len(cases)][1]))
    return uniform_metadata(tuple(make_inputs(dict(shape), dtype, device, int(seed))))


DRAWN_VERSION = 1 << 20  # the version counter of every drawn input tensor, whatever drew it


def uniform_metadata(args: tuple) -> tuple:
    """``args`` with nothing in the tensors' metadata that tells one kind of draw from another.
    A regular draw (``randn`` then ``add_``) is a base tensor at version 1; numerics cases were at
    version 0 or 2, or views (a ``reshape``), and a kernel that read ``_version`` and ``_base``
    dropped its NaN handling on the regular timed draws only (tests/attacks/
    reduce_pass8_numerics_draw_told_apart.py).  Each view becomes a base tensor of the same
    strides and values; every tensor gets the same version counter."""
    import torch

    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if a._base is not None:
                try:
                    base = torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device)
                    base.copy_(a)
                except RuntimeError:  # an overlapping view (an expand: stride 0) cannot be written: dense
                    base = a.clone(memory_format=torch.contiguous_format)
                a = base
            _set_version(a)
        out.append(a)
    return tuple(out)


def _set_version(tensor: Any) -> None:
    import torch

    set_counters = getattr(torch._C._autograd, "_unsafe_set_version_counter", None)
    if set_counters is not None:
        set_counters((tensor,), (DRAWN_VERSION,))
        return
    from torch.autograd.graph import increment_version  # older torch: a step at a time, to a lower mark

    while tensor._version < 64:
        increment_version(tensor)
