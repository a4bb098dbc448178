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


DRAWN_VERSION = 1 << 20  # the version counter of every input tensor a kernel is handed, whatever made it


def uniform_metadata(args: tuple) -> tuple:
    """``args`` with nothing in the tensors' metadata that tells one kind of draw from another.
    A regular draw (``randn`` then ``add_``) is a base tensor at version 1; numerics cases were at
    version 0 or 2, or views (a ``reshape``), and a kernel that read ``_version`` and ``_base``
    dropped its NaN handling on the regular timed draws only (tests/attacks/
    reduce_pass8_numerics_draw_told_apart.py).  Every tensor that is not already what
    ``fresh_tensor`` makes (a view, a storage offset or spare bytes in its storage, shared memory)
    becomes one; every tensor gets the same version counter."""
    import torch

    return _remade(args, torch._C.TensorBase.copy_, always=False)


def own_copy(args: tuple, copy) -> tuple:
    """The worker's own copy of an input set its parent sent (shared memory on the CPU, CUDA IPC
    on a GPU): every tensor copied (with ``copy``, the judge's ``copy_``) into a fresh allocation of
    the worker's, exactly as ``uniform_metadata`` leaves a tensor the worker drew itself.  A
    kernel told the parent's sets from the worker's draws by ``is_shared()``, by the file
    mapping behind the memory, by a storage that cannot be resized and by the version counter
    (tests/attacks/softmax_shared_tells_checked.py)."""
    return _remade(args, copy, always=True)


def _remade(args: tuple, copy, always: bool) -> tuple:
    """``args`` (tensors, nested tuples and lists of them, other values) with every tensor made a
    ``fresh_tensor`` (``always``, or where it is not one already) at the drawn sets' version."""
    import torch

    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if always or not _fresh_already(a):
                a = fresh_tensor(a, copy)
            _set_version(a)
        elif type(a) in (tuple, list):
            a = type(a)(_remade(tuple(a), copy, always))
        out.append(a)
    return tuple(out)


def fresh_tensor(a: Any, copy) -> Any:
    """A new base tensor of ``a``'s sizes, strides (dense ones where ``a``'s overlap: an expand),
    dtype, device and ``requires_grad``, allocated here, at storage offset 0 with no spare bytes,
    holding ``a``'s values (written with ``copy``)."""
    import torch

    with torch.no_grad():
        try:
            base = torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device)
            copy(base, a)
        except RuntimeError:  # overlapping strides (stride 0) cannot be written: dense
            base = torch.empty(a.size(), dtype=a.dtype, device=a.device)
            copy(base, a)
    if a.requires_grad:
        base.requires_grad_(True)
    return base


def _fresh_already(a: Any) -> bool:
    """Is ``a`` what ``fresh_tensor`` would make of it: a base tensor at storage offset 0 whose
    elements do not overlap, its storage exactly their span, private?"""
    if a._base is not None or a.storage_offset() != 0 or a.is_shared():
        return False
    extent = 1
    for n, st in sorted(((n, st) for n, st in zip(a.size(), a.stride()) if n > 1), key=lambda d: d[1]):
        if st < extent:  # overlapping (an expand's stride 0)
            return False
        extent = st * n
    span = 0 if a.numel() == 0 else 1 + sum((n - 1) * st for n, st in zip(a.size(), a.stride()))
    return a.untyped_storage().nbytes() == span * a.element_size()


def _set_version(tensor: Any) -> None:
    import torch

    set_counters = getattr(torch._C._autograd, "_unsafe_set_version_counter", None)
    if set_counters is not None:
        set_counters((tensor,), (DRAWN_VERSION,))
        return
    from torch.autograd.graph import increment_version  # older torch: a step at a time, to a lower mark

    while tensor._version < 64:
        increment_version(tensor)
