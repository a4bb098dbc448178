"""The worker -> parent channel: plain data only (DESIGN §5, "nothing it returns is
deserialised into live objects in the judge").

The worker answers with ``encode(reply)``: a pickle of nested dicts, lists, tuples, str, int,
float, bool, None and bytes — nothing else.  The parent reads it with ``decode``, whose
unpickler refuses every global (``find_class``) and every persistent id, so no pickle opcode
can name a callable: an object whose ``__reduce__`` names ``torch.softmax`` or ``eval`` cannot
run in the parent, whatever the worker (the candidate) puts on the wire.

Output tensors never travel as objects either: the parent allocates the output buffers itself
(shared memory on the CPU, its own CUDA memory shared by IPC on a GPU), the worker copies each
checked output into them, and the parent reads its own buffers (``Worker`` in worker.py,
``Judge.collect`` in stages.py).
"""
from __future__ import annotations

import io
import pickle
from typing import Any

PLAIN_TYPES = (dict, list, tuple, str, int, float, bool, type(None), bytes)
MAX_DEPTH = 32


class NotPlainData(ValueError):
    pass


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}: the worker may send plain data only")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id: the worker may send plain data only")


def check_plain(value: Any, depth: int = 0) -> None:
    """Raise NotPlainData unless ``value`` is built from the plain types only (exact types, no
    subclasses)."""
    if depth > MAX_DEPTH:
        raise NotPlainData("nested too deep")
    kind = type(value)
    if kind not in PLAIN_TYPES:
        raise NotPlainData(f"{kind.__module__}.{kind.__qualname__} is not plain data")
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise NotPlainData(f"dict key of type {type(key).__name__}")
            check_plain(item, depth + 1)
    elif kind in (list, tuple):
        for item in value:
            check_plain(item, depth + 1)


def encode(value: Any) -> bytes:
    """Worker side: the reply as bytes (raises NotPlainData for anything not plain)."""
    check_plain(value)
    return pickle.dumps(value, protocol=4)


def decode(data: bytes) -> Any:
    """Parent side: plain data back, or ``pickle.UnpicklingError``/``NotPlainData``."""
    value = _PlainUnpickler(io.BytesIO(data)).load()
    check_plain(value)
    return value
