"""The size constants of a KernelBench file, and how to move them (pure functions).

A KernelBench file fixes its sizes in module-level integers (``batch_size = 16``, ``dim =
16384``, ``M = 1024 * 2``) that ``get_inputs()`` and ``get_init_inputs()`` read.  Held-out
sizes and ``--scale F`` give those constants new values and execute the file again with them,
so that constants computed from them (``input_shape = (batch_size, dim)``) follow.

Which constants are *sizes*: integers (not bools) of at least ``MIN_SIZE`` whose name does not
say they are a hyper-parameter of an op (kernel size, stride, padding, dilation, groups, heads,
layers, patches...).  The others stay as they are.  Where a size divided another integer
constant in the file (``in_channels % groups == 0``, ``embed_dim % num_heads == 0``), the new
values keep that divisibility when the plain ones do not run.
"""
from __future__ import annotations

import ast
import random
import re
from typing import Mapping

MIN_SIZE = 8
FLOOR = 8  # scaled sizes never go below this (nor below their original value when smaller)
FLOORS = (FLOOR, 16, 32, 64)  # tried in turn when a file does not run with the smaller ones
_NOT_A_SIZE = re.compile(r"kernel|stride|pad|dilation|group|head|layer|patch|stage|expand|ratio|pool|clamp|"
                         r"scale|factor|divisor|slope|alpha|beta|eps|seed", re.IGNORECASE)


def int_constants(source: str, namespace: Mapping[str, object]) -> dict[str, int]:
    """Top-level ``name = expression`` assignments whose value (in the executed module's
    ``namespace``) is an int, in file order."""
    out: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            value = namespace.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                out[name] = int(value)
    return out


def size_names(constants: Mapping[str, int]) -> tuple[str, ...]:
    """The constants that are sizes (see the module docstring)."""
    return tuple(n for n, v in constants.items() if v >= MIN_SIZE and not _NOT_A_SIZE.search(n))


def scaled(constants: Mapping[str, int], names: tuple[str, ...], factor: float, floor: int = FLOOR) -> dict[str, int]:
    """``names`` multiplied by ``factor`` (rounded, at least ``floor`` or the original value
    when that is smaller); others unchanged."""
    out = dict(constants)
    for n in names:
        v = constants[n]
        out[n] = max(min(v, floor), int(round(v * factor)))
    return out


def moved(constants: Mapping[str, int], names: tuple[str, ...], rng: random.Random,
          low: float = 0.75, high: float = 1.25) -> dict[str, int]:
    """Held-out sizes: each size moved by a random factor in [low, high] and made odd, so that
    it differs from the original and power-of-two assumptions break."""
    out = dict(constants)
    for n in names:
        v = constants[n]
        new = max(3, int(round(v * rng.uniform(low, high))))
        if new % 2 == 0:
            new += 1
        if new == v:
            new += 2
        out[n] = new
    return out


def divisibility(constants: Mapping[str, int]) -> list[tuple[str, str]]:
    """Pairs (a, b) with a % b == 0 in the file, b > 1 and a != b, smaller dividends first."""
    pairs = [(a, b) for a, va in constants.items() for b, vb in constants.items()
             if a != b and vb > 1 and va > vb and va % vb == 0]
    return sorted(pairs, key=lambda p: constants[p[0]])


def keep_divisibility(original: Mapping[str, int], new: Mapping[str, int], names: tuple[str, ...]) -> dict[str, int]:
    """``new`` with every size ``a`` that the file made a multiple of ``b`` rounded to a
    multiple of ``b``'s new value (at least one ``b``)."""
    out = dict(new)
    for a, b in divisibility(original):
        if a not in names:
            continue
        step = out[b]
        if out[a] % step:
            out[a] = max(step, int(round(out[a] / step)) * step)
    return out


def changes(original: Mapping[str, int], new: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    return {n: (original[n], new[n]) for n in original if new.get(n, original[n]) != original[n]}


def describe(original: Mapping[str, int], new: Mapping[str, int]) -> str:
    """``batch_size 4096->41, dim 393216->3932`` (or ``no size changed``)."""
    moved_ = changes(original, new)
    if not moved_:
        return "no size changed"
    return ", ".join(f"{n} {a}->{b}" for n, (a, b) in moved_.items())


def with_constants(source: str, values: Mapping[str, int]) -> str:
    """The file's text with the top-level assignments of ``values`` replaced by the numbers."""
    tree = ast.parse(source)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in values):
            node.value = ast.copy_location(ast.Constant(int(values[node.targets[0].id])), node.value)
    return ast.unparse(ast.fix_missing_locations(tree))
