"""Functions rebuilt for the ops: rebound globals, and forwards whose source is rewritten.

A rewritten forward keeps the syntax tree it was compiled from (``REWRITTEN_TREE``), so that a
second applier rewrites the first one's result, not the source file again (a layer whose
``act(fc1(x))`` became the linear_gelu op and whose residual add then became an add_layernorm
op).  Its globals are those of the function it replaces plus the helpers it calls, in a module
registered in ``sys.modules`` under its own name: torch.compile finds a function's globals again
by ``__name__`` when it builds guards.
"""
from __future__ import annotations

import ast
import copy
import inspect
import sys
import textwrap
import types
from typing import Any

REWRITTEN_TREE = "__autokernel_tree__"
_REBOUND_MODULES: list[types.ModuleType] = []


def rebound_globals(fn: types.FunctionType, names: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``fn``'s globals with ``names`` set, as the ``__dict__`` of a registered module."""
    module_name = f"autokernel_rebound_{len(_REBOUND_MODULES)}_{fn.__globals__.get('__name__', 'm')}"
    module = types.ModuleType(module_name)
    module.__dict__.update(fn.__globals__)
    module.__dict__.update(names)
    module.__dict__["__name__"] = module_name
    sys.modules[module_name] = module
    _REBOUND_MODULES.append(module)
    return module.__dict__


def parse_forward(fn: types.FunctionType) -> tuple[ast.Module, ast.FunctionDef] | None:
    """The tree of ``fn`` (the undecorated function; its kept tree when it was rewritten before),
    line numbers as in its file; None when it has no source or is a closure."""
    kept = getattr(fn, REWRITTEN_TREE, None)
    if kept is not None:
        tree = copy.deepcopy(kept)
    else:
        if fn.__code__.co_freevars:
            return None
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            return None
        ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != fn.__name__ or not fdef.args.args:
        return None
    fdef.decorator_list = []
    return tree, fdef


def compile_forward(fn: types.FunctionType, tree: ast.Module, helpers: dict[str, Any]) -> types.FunctionType:
    """The function ``tree`` (from ``parse_forward(fn)``, changed) defines, with ``fn``'s globals
    and ``helpers``."""
    ast.fix_missing_locations(tree)
    code = compile(tree, inspect.getsourcefile(fn) or "<autokernel>", "exec")
    namespace = rebound_globals(fn, helpers)
    name = tree.body[0].name
    exec(code, namespace)
    new = namespace[name]
    namespace[name] = fn.__globals__.get(name, new)
    new.__defaults__, new.__kwdefaults__, new.__qualname__ = fn.__defaults__, fn.__kwdefaults__, fn.__qualname__
    setattr(new, REWRITTEN_TREE, tree)
    return new


def pure(node: ast.expr) -> bool:
    """A name, a constant or an attribute chain on a name: the same value read twice."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


def statement_lists(node: ast.AST):
    """Every list of statements under ``node`` (bodies, else branches, finally blocks)."""
    for child in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(child, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def reached_methods(cls: type, shadowed: set[str], stop: tuple[type, ...], start: str = "forward"):
    """``cls``'s ``start`` method, then each method it reaches through ``self.<name>``, called or
    handed on as a bound method (ALBERT's layer passes ``self.ff_chunk`` to
    ``apply_chunking_to_forward``), and the methods those reach: (name, function as the class
    holds it, undecorated function, tree, its def) for each whose source ``parse_forward`` reads,
    the tree the caller's to change.  A method is a plain function (or a ``functools.wraps``
    chain around one) that a class of ``cls``'s MRO defines before any of ``stop``; static and
    class methods, properties and the names in ``shadowed`` (what the instance holds itself: its
    children) are not followed."""
    queue, seen = [start], set()
    while queue:
        name = queue.pop(0)
        if name in seen or name in shadowed:
            continue
        seen.add(name)
        fn = _defined_function(cls, name, stop)
        inner = inspect.unwrap(fn) if fn is not None else None
        parsed = parse_forward(inner) if isinstance(inner, types.FunctionType) else None
        if parsed is None:
            continue
        tree, fdef = parsed
        self_name = fdef.args.args[0].arg
        queue += [node.attr for node in ast.walk(fdef) if isinstance(node, ast.Attribute)
                  and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name) and node.value.id == self_name]
        yield name, fn, inner, tree, fdef


def _defined_function(cls: type, name: str, stop: tuple[type, ...]) -> types.FunctionType | None:
    """The plain function ``name`` is in the first class of ``cls``'s MRO that defines it; None
    when that is one of ``stop`` or it is anything else."""
    for klass in cls.__mro__:
        if name in vars(klass):
            value = vars(klass)[name]
            return value if klass not in stop and isinstance(value, types.FunctionType) else None
    return None
