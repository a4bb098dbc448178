"""What the loop is asked to optimize: ``Target`` records, from the command line or a plan."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .workspace import sanitize_run_name


class OptimizeError(ValueError):
    """Bad input to the loop (user mistake, exit code 2).  Raised before anything is written."""


@dataclass
class Target:
    """One problem to optimize.

    ``name`` is the directory under ``<workdir>/problems/``; ``spec`` a kind name or a
    problem-file path (``autokernel.problems.get_problem``); ``shapes`` None means the
    problem's default shapes for the device; ``weights`` are calls per shape (the score
    weights); ``start_file`` None means the shipped starter; ``fraction`` is the problem's
    share of the model time (from a plan; used by the orchestrator)."""

    name: str
    spec: str
    shapes: list[dict[str, int]] | None = None
    weights: list[float] | None = None
    dtype: str | None = None
    start_file: Path | None = None
    fraction: float | None = None


def target_dir_name(name: str) -> str:
    """A problem's directory name under ``<workdir>/problems/`` for a kind or a file's stem."""
    from .workspace import sanitize_run_name

    return sanitize_run_name(name).replace("+", "-")


def targets_from_plan(plan) -> list[Target]:
    """One Target per supported problem of an ``autokernel.plan.Plan``."""
    targets = []
    for p in plan.supported:
        if not p.kind:
            continue
        weights = [float(c) for c in p.calls] if p.calls and len(p.calls) == len(p.shapes) else None
        targets.append(Target(name=p.name, spec=p.kind, shapes=[dict(s) for s in p.shapes] or None,
                              weights=weights, dtype=p.dtype or None, fraction=p.fraction))
    return targets


def default_run_name(targets: list[Target], plan_path: Path | None = None, model: str | None = None,
                     current: str | None = None) -> str:
    """The branch's run name: the model's name for a plan (``current``, the run name the
    workdir is on, when it is an older ``plan-<file>`` name, so that such runs resume), else
    the problems' names."""
    if plan_path is not None:
        legacy = sanitize_run_name(f"plan-{Path(plan_path).stem}")
        if current == legacy or not model:
            return legacy
        return sanitize_run_name(model_run_name(model))
    name = "+".join(t.name for t in targets)
    return sanitize_run_name(name if len(name) <= 60 else f"{targets[0].name}+{len(targets) - 1}-more")


def model_run_name(model: str) -> str:
    """``llama`` → ``llama``; ``path/to/net.py:Net`` → ``net-Net``; ``hf:gpt2`` → ``hf-gpt2``."""
    if ".py" in model:
        path, _, cls = model.partition(":")
        return f"{Path(path).stem}-{cls}" if cls else Path(path).stem
    return model.replace(":", "-")


def plan_model(plan_text: str | None) -> str | None:
    """The model named in a plan's text, if any."""
    import json

    try:
        return str(json.loads(plan_text).get("model") or "") or None if plan_text else None
    except (ValueError, AttributeError):
        return None


def resolve_device(device: str) -> str:
    from ..hardware import resolve_device as resolve

    try:
        return resolve(device)
    except ValueError as exc:
        raise OptimizeError(str(exc)) from None
