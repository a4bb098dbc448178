"""The plan's module paths in the namespace of the model ``apply`` is given.

A plan records qualified module names as the profiled model had them.  ``autokernel run --model
hf:gpt2`` profiles the model inside its loader's wrapper (``model.transformer.h.0.ln_2``); the
user who builds ``GPT2LMHeadModel`` and calls ``apply`` has ``transformer.h.0.ln_2``.  The
appliers that match paths exactly (the residual adds fused ahead) then found no place, while
``verify``, which rebuilds the wrapped model, applied them.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..plan import PlanProblem


def rebase(paths: list[str], names: set[str]) -> Callable[[str], str]:
    """A map of the plan's ``paths`` onto the model's module ``names``: the identity where every
    path is a name; else the leading part to drop (the plan's wrapper) or to add (a wrapper of
    the user's) under which the most paths become names, paths that are not under it unchanged."""
    missing = [p for p in paths if p not in names]
    if not missing:
        return lambda p: p
    best, best_hits = (lambda p: p), len(paths) - len(missing)
    for candidate in _candidates(missing, names):
        hits = sum(_found(candidate(p), p, names) for p in paths)
        if hits > best_hits:
            best, best_hits = candidate, hits
    return best


def _found(mapped: str, path: str, names: set[str]) -> bool:
    """``mapped`` names a module; the root (``""``) only counts for a path that was the root or one
    component (the wrapper's child itself): any path maps to the root by dropping all of it."""
    return mapped in names and (mapped != "" or "." not in path)


WRAPPER_DEPTH = 2  # components a wrapper adds to the paths (the hf: loader's: 1)


def _candidates(missing: list[str], names: set[str]):
    drops, adds = set(), set()
    for path in missing:
        parts = path.split(".")
        for k in range(1, min(len(parts), WRAPPER_DEPTH) + 1):
            drops.add(".".join(parts[:k]))
        for name in names:
            if name.endswith("." + path):
                adds.add(name[: -len(path)])
    for prefix in sorted(drops):
        yield lambda p, prefix=prefix: _drop(p, prefix)
    for prefix in sorted(adds):
        yield lambda p, prefix=prefix: prefix + p if p else prefix.rstrip(".")


def _drop(path: str, prefix: str) -> str:
    if path == prefix:
        return ""
    return path[len(prefix) + 1:] if path.startswith(prefix + ".") else path


def rebased_problem(problem: PlanProblem, to_model: Callable[[str], str]) -> PlanProblem:
    """``problem`` with its module paths (``modules``, ``add_from``, ``module_time_us``,
    ``module_calls``) mapped."""
    return dataclasses.replace(
        problem, modules=[to_model(m) for m in problem.modules],
        add_from={to_model(norm): to_model(adder) for norm, adder in problem.add_from.items()},
        module_time_us={to_model(m): t for m, t in problem.module_time_us.items()},
        module_calls={to_model(m): c for m, c in problem.module_calls.items()})
