"""The classes ``apply`` makes, kept so that the modules that switch alike share one.

Each applier names a key for its class (the base class, the ops, what it judged them on), and a
class made under a key was reused for every later module with that key.  A key that left out
something the forward holds gave a second model of other sizes the first one's class, whose guard
then declined every call, silently: five appliers did (the thirtieth session).  So a key only
finds the classes to look at; one is reused where the members it was made from hold the same as
the members asked for now (``same_held``), and a new class is made otherwise."""
from __future__ import annotations

import functools
import types
from typing import Any, Callable

import torch
import torch.nn as nn

# cache key -> the classes made under it, each with the members it was made from
_SUBCLASSES: dict[tuple, list[tuple[dict[str, Any], type]]] = {}
_HELD_BY_CLASS_BODY = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__"})


def kept_class(cache_key: tuple, members: dict[str, Any], make: Callable[[], type]) -> type:
    """The class ``make()`` makes from ``members``, made once per distinct ``members`` under
    ``cache_key``."""
    made = _SUBCLASSES.setdefault(cache_key, [])
    for held, cls in made:
        if same_held(held, members):
            return cls
    cls = make()
    made.append((members, cls))
    return cls


def class_members(cls: type) -> dict[str, Any]:
    """What a made class's own body holds (its methods and attributes)."""
    return {name: value for name, value in vars(cls).items() if name not in _HELD_BY_CLASS_BODY}


def same_held(a: Any, b: Any, seen: set[tuple[int, int]] | None = None) -> bool:
    """Do ``a`` and ``b`` hold the same: functions by their code and what their closure cells,
    defaults and private globals (a rewritten forward's) hold, recursively; containers item by
    item; tensors and modules only as the same object; other values by ``==``."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    seen = set() if seen is None else seen
    if (id(a), id(b)) in seen:
        return True  # compared further up
    seen.add((id(a), id(b)))
    if isinstance(a, types.FunctionType):
        return _same_function(a, b, seen)
    if isinstance(a, (staticmethod, classmethod)):
        return same_held(a.__func__, b.__func__, seen)
    if isinstance(a, property):
        return all(same_held(x, y, seen) for x, y in ((a.fget, b.fget), (a.fset, b.fset), (a.fdel, b.fdel)))
    if isinstance(a, functools.partial):
        return same_held((a.func, a.args, a.keywords), (b.func, b.args, b.keywords), seen)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_held(x, y, seen) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_held(a[k], b[k], seen) for k in a)
    if isinstance(a, (torch.Tensor, nn.Module, types.ModuleType, type)):
        return False  # not the same object
    try:
        equal = a == b
    except Exception:  # noqa: BLE001 - values that cannot be compared are not the same
        return False
    return equal if isinstance(equal, bool) else False


def _same_function(a: types.FunctionType, b: types.FunctionType, seen: set[tuple[int, int]]) -> bool:
    if a.__code__ != b.__code__:
        return False
    cells_a, cells_b = a.__closure__ or (), b.__closure__ or ()
    if len(cells_a) != len(cells_b):
        return False
    for x, y in zip(cells_a, cells_b):
        filled_x, filled_y = _contents(x), _contents(y)
        if (filled_x is _EMPTY) != (filled_y is _EMPTY):
            return False
        if filled_x is not _EMPTY and not same_held(filled_x, filled_y, seen):
            return False
    if not same_held((a.__defaults__, a.__kwdefaults__), (b.__defaults__, b.__kwdefaults__), seen):
        return False
    if a.__globals__ is b.__globals__:
        return True
    # globals of their own (a forward compiled from rewritten source): what the code reads there
    for name in _code_names(a.__code__):
        if (name in a.__globals__) != (name in b.__globals__):
            return False
        if name in a.__globals__ and not same_held(a.__globals__[name], b.__globals__[name], seen):
            return False
    return True


_EMPTY = object()


def _contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        return _EMPTY


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names
