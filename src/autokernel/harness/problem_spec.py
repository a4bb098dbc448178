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
    checks.  ``{"rewrite": [root, fresh]}``: a call whose inputs the worker writes into the memory
    of the call before it, drawn from the regular draw ``root``, its floating-point tensors from
    the regular draw ``fresh`` (``rewritten_set``)."""
    if isinstance(seed, dict):
        root, fresh = seed["rewrite"]
        return rewritten_set(draw_set(make_inputs, adversarial_inputs, shape, dtype, device, root),
                             draw_set(make_inputs, adversarial_inputs, shape, dtype, device, fresh))
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


def rewritten_set(base: Any, fresh: Any) -> Any:
    """``base`` with each floating-point tensor's values taken from ``fresh`` (a draw of the same
    structure) where the two match in shape and dtype; every other value (integer tensors, the
    non-tensor arguments: eps, scales, ignore_index...) stays ``base``'s.  What a model hands a
    layer when the caching allocator gives it the previous call's input buffers back with new
    activations in them and the layer's own constants unchanged: a timed call of this form gets
    the previous call's memory (worker_main ``_previous_memory``), so a result kept by the inputs'
    addresses and the scalars comes back stale there.  The smoke stage mixes two draws the same
    way (each floating input rewritten alone, the rest kept), on every problem."""
    import torch

    if isinstance(base, torch.Tensor):
        if isinstance(fresh, torch.Tensor) and base.is_floating_point() and fresh.dtype == base.dtype \
                and fresh.shape == base.shape and fresh.stride() == base.stride():
            return fresh
        return base
    if type(base) in (tuple, list) and type(fresh) is type(base) and len(base) == len(fresh):
        return type(base)(rewritten_set(b, f) for b, f in zip(base, fresh))
    return base


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


def own_copy(args: tuple, copy, memory: list | None = None) -> tuple:
    """The worker's own copy of an input set its parent sent (shared memory on the CPU, CUDA IPC
    on a GPU): every tensor copied (with ``copy``, the judge's ``copy_``) into a fresh allocation of
    the worker's, exactly as ``uniform_metadata`` leaves a tensor the worker drew itself.  A
    kernel told the parent's sets from the worker's draws by ``is_shared()``, by the file
    mapping behind the memory, by a storage that cannot be resized and by the version counter
    (tests/attacks/softmax_shared_tells_checked.py).  ``memory``: for each tensor in order, a
    storage of the worker's whose memory the copy takes (``fresh_tensor``), or None."""
    return _remade(args, copy, always=True, memory=list(memory) if memory is not None else None)


def _remade(args: tuple, copy, always: bool, memory: list | None = None) -> tuple:
    """``args`` (tensors, nested tuples and lists of them, other values) with every tensor made a
    ``fresh_tensor`` (``always``, or where it is not one already) at the drawn sets' version;
    ``memory`` (consumed from the front, one entry per tensor in order): see ``own_copy``."""
    import torch

    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            held = memory.pop(0) if memory else None
            if always or not _fresh_already(a):
                a = fresh_tensor(a, copy, held)
            _set_version(a)
        elif type(a) in (tuple, list):
            a = type(a)(_remade(tuple(a), copy, always, memory))
        out.append(a)
    return tuple(out)


def fresh_tensor(a: Any, copy, memory: Any = None) -> Any:
    """A new base tensor of ``a``'s sizes, strides (dense ones where ``a``'s overlap: an expand),
    dtype, device and ``requires_grad``, allocated here, at storage offset 0 with no spare bytes,
    holding ``a``'s values (written with ``copy``).  ``memory``: a storage of the caller's, of
    exactly the new storage's size and device, whose memory the tensor takes in place of its own
    allocation (``take_memory``): the same addresses, in a tensor made as any other.  Where this
    PyTorch cannot move memory between storages, ``memory`` is a storage the caller allocated at
    the addresses it wanted (worker_main ``_landed``), and the tensor is made over it."""
    import torch

    with torch.no_grad():
        base = None
        if memory is not None and not can_take_memory():
            base = _made_over(a, memory)
            memory = None
        if base is None:
            base = allocated_like(a)
        if memory is not None:
            storage = torch._C.TensorBase.untyped_storage(base)
            if torch._C.StorageBase.nbytes(storage) == torch._C.StorageBase.nbytes(memory) and \
                    storage.device == memory.device:
                take_memory(storage, memory)
            del storage
        copy(base, a)
    if a.requires_grad:
        base.requires_grad_(True)
    return base


def allocated_like(a: Any, device: Any = None) -> Any:
    """An empty tensor of ``a``'s sizes and dtype on ``device`` (``a``'s by default), of its
    strides where they can be written (dense ones where they overlap or are refused)."""
    import torch

    device = a.device if device is None else device
    if not _overlaps(a):
        try:
            return torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=device)
        except RuntimeError:
            pass
    return torch.empty(a.size(), dtype=a.dtype, device=device)


def _made_over(a: Any, memory: Any) -> Any:
    """A tensor of ``a``'s layout (as ``allocated_like`` makes it) over the storage ``memory``,
    allocating nothing; None where that layout does not fill ``memory`` exactly."""
    import torch

    empty = allocated_like(a, device="meta")
    size, stride = tuple(empty.size()), tuple(empty.stride())
    span = 0 if empty.numel() == 0 else 1 + sum((n - 1) * st for n, st in zip(size, stride))
    if span * empty.element_size() != torch._C.StorageBase.nbytes(memory) or memory.device != a.device:
        return None
    base = torch.empty(0, dtype=a.dtype, device=a.device)
    torch._C.TensorBase.set_(base, memory, 0, size, stride)
    return base


def _overlaps(t: Any) -> bool:
    """Would a copy into ``t``'s layout be refused as writing one element twice (a stride 0 of a
    dimension with more than one element, what ``copy_`` checks)?"""
    return any(st == 0 and n > 1 for n, st in zip(t.size(), t.stride()))


_SWAP: list = []  # UntypedStorage's C method that swaps two storages' memory, taken once (None: not in this torch)


def can_take_memory() -> bool:
    """Can a storage take another's memory here (``_swap_data_ptr_``, PyTorch 2.12 on)?  The
    worker asks before any kernel file loads: the C method is taken then, out of a kernel's reach."""
    if not _SWAP:
        import os

        import torch

        # AUTOKERNEL_JUDGE_NO_MEMORY_SWAP=1: judge as on a PyTorch without it (2.11, the GPU machines'):
        # the memory a rewrite frees goes back to the allocator, which hands it out to whatever comes next
        off = os.environ.get("AUTOKERNEL_JUDGE_NO_MEMORY_SWAP") == "1"
        _SWAP.append(None if off else getattr(torch._C.StorageBase, "_swap_data_ptr_", None))
    return _SWAP[0] is not None


def take_memory(storage: Any, memory: Any) -> None:
    """``storage`` takes the memory of ``memory`` (a storage of the same size and device, or an
    empty one), and ``memory`` takes its memory: the StorageImpl objects stay where they are, only
    their data pointers (with their deleters) change places, so each allocation is still freed by
    its own allocator when the storage that holds it goes."""
    if not can_take_memory():
        raise RuntimeError("this PyTorch cannot move memory between storages")
    _SWAP[0](storage, memory)


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
