"""Host-to-device copies a forward makes while a CUDA graph captures it.

A stream that captures cannot copy from pageable host memory: transformers 5.17's eager mask
(``torch.tensor(0.0, device=mask.device)``, BLOOM's, GPT-J's and every model on eager attention)
failed our capture on an H100 with "Cannot copy between CPU and CUDA tensors during CUDA graph
capture unless the CPU tensor is pinned".  Under ``PinnedHostCopies`` such a tensor is made on the
host, copied into pinned memory and copied from there; the graph then holds that copy, and the
pinned buffer lives as long as the graph (``kept``), so every replay copies the value the capture
saw, the host's part of a forward being fixed at capture as it is for any CUDA graph.  (``verify``
compares the captured model's output with the original's, so a forward whose host values do
change from call to call fails there.)
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

FACTORIES = (torch.tensor, torch.as_tensor)
MOVES = (torch.Tensor.to, torch.Tensor.cuda)


class PinnedHostCopies(TorchFunctionMode):
    """Within it, ``torch.tensor``/``torch.as_tensor`` onto a device ``to_device`` accepts, and
    ``Tensor.to``/``Tensor.cuda`` of a host tensor onto one, go through pinned memory (``pin``);
    the pinned buffers are appended to ``kept``."""

    def __init__(self, kept: list[torch.Tensor], pin: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 to_device: Callable[[torch.device], bool] | None = None):
        super().__init__()
        self.kept = kept
        self.pin = pin or (lambda t: t.pin_memory())
        self.to_device = to_device or (lambda d: d.type == "cuda")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in FACTORIES:
            device = _device(kwargs.get("device"))
            if device is not None and self.to_device(device):
                kwargs.pop("device")
                host = func(*args, **kwargs)
                if isinstance(host, torch.Tensor) and host.device.type == "cpu":
                    return self._moved(host, device)
                return host.to(device)
        elif func in MOVES and args and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu":
            target = _target(func, args[1:], kwargs)
            if target is not None and self.to_device(target):
                moved = self._moved(args[0], target)
                dtype = _dtype(args[1:], kwargs)
                return moved if dtype is None else moved.to(dtype)
        return func(*args, **kwargs)

    def _moved(self, host: torch.Tensor, device: torch.device) -> torch.Tensor:
        pinned = self.pin(host.contiguous())
        self.kept.append(pinned)
        return pinned.to(device, non_blocking=True)


def _device(value: Any) -> torch.device | None:
    if value is None:
        return None
    if isinstance(value, int):
        return torch.device("cuda", value)
    try:
        return torch.device(value)
    except (TypeError, RuntimeError):
        return None


def _target(func, rest: tuple, kwargs: dict) -> torch.device | None:
    """The device a ``Tensor.to``/``Tensor.cuda`` call moves to; None when it names none."""
    if func is torch.Tensor.cuda:
        return torch.device("cuda", rest[0]) if rest and isinstance(rest[0], int) else \
            _device(kwargs.get("device", "cuda"))
    if "device" in kwargs:
        return _device(kwargs["device"])
    for a in rest:
        if isinstance(a, torch.Tensor):
            return a.device
        if isinstance(a, (str, torch.device)):
            return _device(a)
    return None


def _dtype(rest: tuple, kwargs: dict) -> torch.dtype | None:
    if isinstance(kwargs.get("dtype"), torch.dtype):
        return kwargs["dtype"]
    for a in rest:
        if isinstance(a, torch.dtype):
            return a
        if isinstance(a, torch.Tensor):
            return a.dtype
    return None
