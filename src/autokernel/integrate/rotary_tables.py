"""Rotary functions of one tensor whose tables come in another convention than the ops' ``(x
[B, H, S, D], cos [S, D], sin [S, D])``: GPT-J's and CodeGen's ``apply_rotary_pos_emb(x, sin,
cos)`` takes x as [B, S, H, D] and each angle once ([1, S, D/2], repeated for both elements of a
pair inside).  A probe tells which convention a function keeps (once per function); its calls
then reach the op with the tables widened and x seen as [B, H, S, D] (a view: the ops read
strided heads and positions)."""
from __future__ import annotations

import inspect
import re
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..recognize import module_wrapped_function
from .ops import traced_as_original
from .patching import _code_names
from .selection import KernelOp

_ROTARY_NAME = re.compile(r"rotary|rope", re.IGNORECASE)


@dataclass(frozen=True)
class TableConvention:
    sin_first: bool  # f(x, sin, cos)
    half: bool  # each angle once: tables [.., S, D/2]
    seq_first: bool  # x is [B, S, H, D]


# every convention but the ops' own (``calls._rotary_form`` takes that one)
CONVENTIONS = tuple(TableConvention(s, h, q) for s in (False, True) for h in (False, True) for q in (False, True))[1:]


def widen(kind: str, table: torch.Tensor) -> torch.Tensor:
    """A half-wide table as the op takes it: each angle at both elements of its pair (interleaved
    pairs) or in both halves (``rotary``'s rotate_half layout)."""
    return table.repeat_interleave(2, -1) if kind == "rotary_interleaved" else torch.cat((table, table), -1)


_PROBED: dict[tuple[types.FunctionType, str], TableConvention | None] = {}


def table_convention(fn: Any, kind: str) -> TableConvention | None:
    """The convention in which ``fn``, a rotary function of one tensor (``f(x, a, b)``, a name
    that says rotary or rope, calling a ``rotate*`` function), computes ``kind``'s reference;
    None for the ops' own convention or none."""
    fn = module_wrapped_function(fn)
    if not isinstance(fn, types.FunctionType) or not _ROTARY_NAME.search(fn.__name__):
        return None
    if not any(n.startswith("rotate") for n in _code_names(fn.__code__)):
        return None
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    if len(params) != 3:
        return None
    if (fn, kind) not in _PROBED:
        _PROBED[(fn, kind)] = next((c for c in CONVENTIONS if _computes(fn, kind, c)), None)
    return _PROBED[(fn, kind)]


def _computes(fn: types.FunctionType, kind: str, convention: TableConvention) -> bool:
    from ..problems import get_problem

    gen = torch.Generator().manual_seed(1234)
    B, H, S, D = 1, 2, 5, 8  # H != S: a function reading the other layout fails to broadcast
    x = torch.randn(B, H, S, D, generator=gen)
    width = D // 2 if convention.half else D
    cos, sin = torch.randn(1, S, width, generator=gen), torch.randn(1, S, width, generator=gen)
    full_cos, full_sin = (widen(kind, cos[0]), widen(kind, sin[0])) if convention.half else (cos[0], sin[0])
    want = get_problem(kind).reference(x, full_cos, full_sin)
    given = x.transpose(1, 2).contiguous() if convention.seq_first else x
    try:
        with torch.no_grad():
            got = fn(given, *((sin, cos) if convention.sin_first else (cos, sin)))
    except Exception:  # noqa: BLE001 - a convention the function cannot take
        return False
    if not isinstance(got, torch.Tensor) or got.shape != given.shape:
        return False
    return torch.allclose(got.transpose(1, 2) if convention.seq_first else got, want, atol=1e-5)


def table_replacement(k: KernelOp, original: Callable[..., Any], convention: TableConvention) -> Callable[..., Any]:
    """``original``'s stand-in: the op where the call fits the probed convention, else ``original``."""
    op, dtype, kind = k.op, k.dtype, k.kind

    def rotary(x, a, b, *args, **kwargs):
        cos, sin = (b, a) if convention.sin_first else (a, b)
        if args or kwargs or traced_as_original(op) or not _fits(x, cos, sin, dtype, convention):
            return original(x, a, b, *args, **kwargs)
        S = x.shape[1] if convention.seq_first else x.shape[2]
        c, s = cos.reshape(S, cos.shape[-1]), sin.reshape(S, sin.shape[-1])
        if convention.half:
            c, s = widen(kind, c), widen(kind, s)
        if convention.seq_first:
            return op(x.transpose(1, 2), c, s).transpose(1, 2)
        return op(x, c, s)

    return rotary


def _fits(x: Any, cos: Any, sin: Any, dtype: torch.dtype, convention: TableConvention) -> bool:
    if not all(isinstance(t, torch.Tensor) for t in (x, cos, sin)) or x.dim() != 4 or cos.dim() < 2:
        return False
    S, D = (x.shape[1] if convention.seq_first else x.shape[2]), x.shape[-1]
    return (x.dtype == cos.dtype == sin.dtype == dtype and cos.shape == sin.shape and D % 2 == 0
            and all(n == 1 for n in cos.shape[:-2]) and cos.shape[-2] == S
            and cos.shape[-1] == (D // 2 if convention.half else D))
