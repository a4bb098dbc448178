"""Rotary functions whose tables come in another convention than the ops' (``x`` [B, H, S, D],
``cos`` and ``sin`` [S, D], an angle per element): GPT-J's and CodeGen's
``apply_rotary_pos_emb(x, sin, cos)`` takes x as [B, S, H, D] and each angle once ([1, S, D/2],
repeated for both elements of a pair inside); ERNIE 4.5's and GLM's ``apply_rotary_pos_emb(q, k,
cos, sin)`` take full-width tables whose first half holds each angle once, and GLM rotates only
the tables' width of each head, passing the rest through.  A probe tells which convention a
function keeps (once per function); its calls then reach the op with the tables widened and x
seen as [B, H, S, D] (a view: the ops read strided heads and positions)."""
from __future__ import annotations

import inspect
import itertools
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
TABLES = ("full", "half", "first_half")


@dataclass(frozen=True)
class TableConvention:
    sin_first: bool = False  # f(x, sin, cos)
    # "full": an angle per element; "half": each angle once ([.., R/2]); "first_half": full-width
    # tables ([.., R]) whose first half holds each angle once
    tables: str = "full"
    seq_first: bool = False  # x is [B, S, H, D]
    partial: bool = False  # rotates the first R of x's D (R from the tables), the rest passed through

    def rotated(self, width: int) -> int:
        """R, the dims rotated, from the tables' last dim."""
        return 2 * width if self.tables == "half" else width


# the ops' own convention, on the first R dims of each head (R the tables' width), the rest passed through
PARTIAL = TableConvention(partial=True)
# every convention but the ops' own (``calls._rotary_form`` takes that one), a partial one first: a
# function that rotates part of each head rotates all of it when the tables are as wide as the head
CONVENTIONS = tuple(c for c in (TableConvention(s, t, q, p) for s, t, q, p
                                in itertools.product((False, True), TABLES, (False, True), (True, False)))
                    if c != TableConvention())


def widen(kind: str, angles: torch.Tensor) -> torch.Tensor:
    """Tables holding each angle once as the op takes them: each angle at both elements of its
    pair (interleaved pairs) or in both halves (``rotary``'s rotate_half layout)."""
    return angles.repeat_interleave(2, -1) if kind == "rotary_interleaved" else torch.cat((angles, angles), -1)


def op_tables(kind: str, convention: TableConvention, table: torch.Tensor) -> torch.Tensor:
    """A table as the function takes it ([S, width]) as the op takes it ([S, R])."""
    if convention.tables == "half":
        return widen(kind, table)
    if convention.tables == "first_half":
        return widen(kind, table[..., : table.shape[-1] // 2])
    return table


_PROBED: dict[tuple[types.FunctionType, str], TableConvention | None] = {}


def table_convention(fn: Any, kind: str) -> TableConvention | None:
    """The convention in which ``fn``, a rotary function (a name that says rotary or rope, calling
    a ``rotate*`` function) of one tensor (``f(x, a, b)``) or of q and k (``f(q, k, a, b)``),
    computes ``kind``'s reference; None for the ops' own convention or none."""
    pair = rotary_arity(fn)
    if pair is None:
        return None
    fn = module_wrapped_function(fn)
    if (fn, kind) not in _PROBED:
        _PROBED[(fn, kind)] = next((c for c in CONVENTIONS if _computes(fn, kind, c, pair)), None)
    return _PROBED[(fn, kind)]


def rotary_arity(fn: Any, rotates: Callable[[str], bool] = lambda name: name.startswith("rotate")) -> bool | None:
    """For a rotary function (a name that says rotary or rope, a call of a function whose name
    ``rotates`` accepts): True for ``f(q, k, a, b)``, False for ``f(x, a, b)``; None for anything else."""
    fn = module_wrapped_function(fn)
    if not isinstance(fn, types.FunctionType) or not _ROTARY_NAME.search(fn.__name__):
        return None
    if not any(rotates(n) for n in _code_names(fn.__code__)):
        return None
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return {4: True, 3: False}.get(len(params))


def _computes(fn: types.FunctionType, kind: str, convention: TableConvention, pair: bool) -> bool:
    from ..problems import get_problem

    gen = torch.Generator().manual_seed(1234)
    B, H, S, D = 1, 2, 5, 8  # H != S: a function reading the other layout fails to broadcast
    R = D // 2 if convention.partial else D
    width = R // 2 if convention.tables == "half" else R
    tables = [torch.randn(S, width, generator=gen) for _ in range(2)]  # cos, sin as the function takes them
    cos, sin = (op_tables(kind, convention, t) for t in tables)
    heads = [torch.randn(B, H, S, D, generator=gen) for _ in range(2 if pair else 1)]
    reference = get_problem(kind).reference
    want = [torch.cat((reference(x[..., :R], cos, sin), x[..., R:]), -1) for x in heads]
    given = [x.transpose(1, 2).contiguous() if convention.seq_first else x for x in heads]
    order = (tables[1], tables[0]) if convention.sin_first else (tables[0], tables[1])
    try:
        with torch.no_grad():
            got = fn(*given, *(t[None] for t in order))
    except Exception:  # noqa: BLE001 - a convention the function cannot take
        return False
    got = tuple(got) if pair and isinstance(got, (tuple, list)) else (got,)
    return len(got) == len(want) and all(
        isinstance(g, torch.Tensor) and g.shape == x.shape
        and torch.allclose((g.transpose(1, 2) if convention.seq_first else g).float(), w, atol=1e-5)
        for g, x, w in zip(got, given, want))


def table_replacement(k: KernelOp, original: Callable[..., Any], convention: TableConvention) -> Callable[..., Any]:
    """``original``'s stand-in: the op where the call fits the probed convention, else ``original``."""
    op, dtype, kind = k.op, k.dtype, k.kind
    pair = rotary_arity(original)

    def rotate(x, cos, sin):
        S = x.shape[1] if convention.seq_first else x.shape[2]
        R = convention.rotated(cos.shape[-1])
        c = op_tables(kind, convention, cos.reshape(S, cos.shape[-1]))
        s = op_tables(kind, convention, sin.reshape(S, sin.shape[-1]))
        heads = x.transpose(1, 2) if convention.seq_first else x
        out = op(heads[..., :R], c, s)
        if R < x.shape[-1]:
            out = torch.cat((out, heads[..., R:]), -1)
        return out.transpose(1, 2) if convention.seq_first else out

    count = 4 if pair else 3

    def rotary(*args, **kwargs):
        if len(args) != count or kwargs or traced_as_original(op):
            return original(*args, **kwargs)
        tensors, a, b = args[:-2], args[-2], args[-1]
        cos, sin = (b, a) if convention.sin_first else (a, b)
        if not all(_fits(x, cos, sin, dtype, convention) for x in tensors):
            return original(*args, **kwargs)
        out = tuple(rotate(x, cos, sin) for x in tensors)
        return out if pair else out[0]

    return rotary


def _fits(x: Any, cos: Any, sin: Any, dtype: torch.dtype, convention: TableConvention) -> bool:
    if not all(isinstance(t, torch.Tensor) for t in (x, cos, sin)) or x.dim() != 4 or cos.dim() < 2:
        return False
    S, D = (x.shape[1] if convention.seq_first else x.shape[2]), x.shape[-1]
    R = convention.rotated(cos.shape[-1])
    return (x.dtype == cos.dtype == sin.dtype == dtype and cos.shape == sin.shape and R % 2 == 0
            and (R == D or convention.partial and 0 < R < D)
            and all(n == 1 for n in cos.shape[:-2]) and cos.shape[-2] == S)
