"""What the worker checks of a call's outputs before it keeps them: plain tensors of the
declared dtype, shape and device, with nothing of the kernel's planted on them.

A method looked up through a tensor finds an attribute set on that very tensor first (``out.numel
= f``: an instance attribute shadows a method of the class), and ``untyped_storage()`` hands back
the same storage object each time, on which the same holds (``.data_ptr``).  Every method the
worker calls on a tensor it was handed back (or handed over) would then run the kernel's code in
the judge's own work, after the timer stopped, unwatched: the real computation of an output
that its call only allocated passed all six stages at 200x the honest time.  So the worker
calls the C functions taken before any kernel loaded (``numel``, ``span``, ``detach``...), never
methods through the tensor, and ``planted`` names what the kernel set (a finding)."""
from __future__ import annotations

from typing import Any

_TAKEN: dict[str, Any] = {}


def take_accessors() -> None:
    """Bind the C functions (the worker calls this before any kernel file loads)."""
    if _TAKEN:
        return
    import torch

    tensor, storage = torch._C.TensorBase, torch._C.StorageBase
    _TAKEN.update(numel=tensor.numel, storage=tensor.untyped_storage, detach=tensor.detach, copy=tensor.copy_,
                  data_ptr=storage.data_ptr, nbytes=storage.nbytes, vars=vars, type=type,
                  Tensor=torch.Tensor, UntypedStorage=torch.UntypedStorage,
                  tensor_types=(torch.Tensor, torch.nn.Parameter))


def _taken() -> dict[str, Any]:
    if not _TAKEN:
        take_accessors()
    return _TAKEN


def numel(t: Any) -> int:
    return _taken()["numel"](t)


def span(t: Any) -> tuple[int, int]:
    """The memory range of ``t``'s storage."""
    c = _taken()
    s = c["storage"](t)
    ptr = c["data_ptr"](s)
    return ptr, ptr + c["nbytes"](s)


def planted(tensors: Any) -> str | None:
    """What the kernel set on the plain tensors among ``tensors`` or on their storages
    (instance attributes, a storage of another class), named; None when nothing."""
    c = _taken()
    kind, names = c["type"], []
    for i, t in enumerate(tensors):
        if kind(t) not in c["tensor_types"]:
            continue
        names += [f"tensor {i}: .{name}" for name in c["vars"](t)]
        s = c["storage"](t)
        if kind(s) is not c["UntypedStorage"]:
            names.append(f"tensor {i}: a storage of class {kind(s).__name__}")
        else:
            names += [f"tensor {i}'s storage: .{name}" for name in c["vars"](s)]
    return ", ".join(names[:5]) if names else None


def tensors_in(args: Any) -> list:
    import torch

    if type(args) is torch.Tensor:
        return [args]
    if type(args) in (list, tuple):
        return [t for a in args for t in tensors_in(a)]
    return []


def check_outputs(outs: tuple, expected: list, device: str) -> str | None:
    """None when ``outs`` are plain tensors with the expected (shape, dtype) each, on the
    device; else what is wrong, in one line."""
    import torch

    if len(outs) != len(expected):
        return f"kernel returned {len(outs)} output(s); the reference returns {len(expected)}"
    for i, (out, (shape, dtype)) in enumerate(zip(outs, expected)):
        label = f"output {i}" if len(outs) > 1 else "output"
        kind = type(out)
        if kind is not torch.Tensor:
            if isinstance(out, torch.Tensor):
                return f"{label} is a {kind.__name__}, a subclass of torch.Tensor: return a plain tensor"
            return f"{label} is a {kind.__name__}, not a tensor"
        if tuple(out.shape) != tuple(shape):
            return f"{label} has shape {list(out.shape)}; expected {list(shape)}"
        if str(out.dtype) != str(dtype):
            return f"{label} has dtype {str(out.dtype).replace('torch.', '')}; expected {str(dtype).replace('torch.', '')}"
        if out.layout != torch.strided or out.is_meta:
            return f"{label} is a {out.layout} tensor{' on the meta device' if out.is_meta else ''}; return a dense one"
        if out.device.type != torch.device(device).type:
            return f"{label} is on {out.device}; expected {device}"
    return None


_BITS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def output_digest(outs: tuple) -> tuple:
    """A cheap fingerprint of the outputs' bits (per output: the int64 sum of its elements read
    as integers of the same width, and the sum weighted by position parity), taken right after
    the call returned, outside the timed window.  Compared again when the parent collects the
    outputs: an output that changed in between was written after its call returned (work
    deferred to a later call of the request)."""
    return digest_values(*digest_sums(outs))


def digest_sums(outs: tuple, host: Any = None) -> tuple[list, Any]:
    """The digest's sums, enqueued (on a GPU, no host synchronisation): (where each output's
    pair is, None for an output with no bits; the sums).  With ``host`` (a pinned int64 CPU
    tensor of the judge's), GPU sums that fit are also copied into it without waiting: the
    worker reads them after the call's own synchronisation (``digest_values``)."""
    import torch

    sums, places = [], []
    for o in outs:
        if type(o) is not torch.Tensor or o.layout != torch.strided or o.is_meta or numel(o) == 0:
            places.append(None)
            continue
        # no ``torch.no_grad()``: the detached view records no graph, and no_grad is Python of a torch
        # module whose globals no check compares (a kernel bound ``torch.autograd.grad_mode.torch`` to
        # a stand-in, and computed its output there, before this digest, untimed and unwatched)
        flat = _taken()["detach"](o).reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        bits = flat.view(getattr(torch, _BITS[flat.element_size()])) if flat.element_size() in _BITS else flat
        places.append(len(sums))
        sums += [torch.sum(bits, dtype=torch.int64), torch.sum(bits[1::2], dtype=torch.int64)]
    if sums and len({t.device for t in sums}) == 1:  # one transfer: one host sync per call, not two per output
        stacked = torch.stack(sums)
        if host is not None and stacked.is_cuda and len(sums) <= _taken()["numel"](host):
            part = host[:len(sums)]
            _taken()["copy"](part, stacked, True)  # non-blocking: done when the stream is
            return places, part
        return places, stacked
    return places, sums


def digest_values(places: list, sums: Any) -> tuple:
    """The digest from ``digest_sums``'s answer (reads the sums: on a GPU, a synchronisation
    unless they were copied to the host and the stream was synchronised since)."""
    if type(sums) is list:
        values = [int(t) for t in sums]
    else:
        values = [int(v) for v in sums.tolist()]
    return tuple(None if at is None else (values[at], values[at + 1]) for at in places)
