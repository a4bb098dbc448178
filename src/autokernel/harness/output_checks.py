"""What the worker checks of a call's outputs before it keeps them: plain tensors of the
declared dtype, shape and device."""
from __future__ import annotations

from typing import Any


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
    import torch

    sums, places = [], []
    for o in outs:
        if type(o) is not torch.Tensor or o.layout != torch.strided or o.is_meta or o.numel() == 0:
            places.append(None)
            continue
        with torch.no_grad():
            flat = o.detach().reshape(-1)
            if flat.is_complex():
                flat = torch.view_as_real(flat).reshape(-1)
            bits = flat.view(getattr(torch, _BITS[flat.element_size()])) if flat.element_size() in _BITS else flat
            places.append(len(sums))
            sums += [torch.sum(bits, dtype=torch.int64), torch.sum(bits[1::2], dtype=torch.int64)]
    if sums and len({t.device for t in sums}) == 1:  # one transfer: one host sync per call, not two per output
        values = [int(v) for v in torch.stack(sums).tolist()]
    else:
        values = [int(t) for t in sums]
    return tuple(None if at is None else (values[at], values[at + 1]) for at in places)
