"""Live tensor bytes in this process, measured as the judge allocates (tests only).

``LiveBytes`` is a dispatch mode: after every aten op it records the storages of the op's
outputs (by weak reference) and sums the ones still alive, so ``peak`` is the most tensor
memory this process held at once at any op boundary, temporaries included, whoever allocated
it.  The worker is another process: its memory is not counted here."""
from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.now = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                ref = StorageWeakRef(storage)
                if ref.cdata not in self.live:
                    self.live[ref.cdata] = (ref, storage.nbytes())
        self.now = sum(n for _, n in self.live.values())
        self.peak = max(self.peak, self.now)
        return out
