"""``plan.json``: what the profiler found in a model, and what the loop will work on.

Written by ``autokernel profile``; read by ``autokernel optimize --plan``, the orchestrator,
``apply``/``verify`` and the report.  One ``PlanProblem`` per (kind, dtype, set of shapes)
group; ``fraction`` is its share of the model's measured time (device kernel time on a GPU,
CPU op time otherwise — ``time_kind`` says which).  The share that no supported kind covers is
in ``uncovered`` so that nothing is hidden: ``sum(p.fraction) + sum(u.fraction) <= 1``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .files import write_text_atomic

PLAN_VERSION = 1


@dataclass
class PlanProblem:
    name: str  # unique in the plan, a directory name: "rmsnorm", "matmul_1", ...
    kind: str  # a built-in problem kind (or "" when unsupported)
    dtype: str  # "bf16" | "fp16" | "fp32"
    shapes: list[dict[str, int]]  # the model's real shapes, in the kind's dims
    calls: list[int]  # calls per forward pass, one per shape (the score weights)
    time_us: float  # measured time per forward pass, all shapes
    fraction: float  # time_us / total_time_us
    modules: list[str] = field(default_factory=list)  # qualified module names where it occurs
    supported: bool = True
    note: str = ""  # why unsupported, or anything the recognizer wants to say
    # add_<norm> kinds: norm module -> the module whose forward ends with the residual add that
    # the norm reads (the next block's first norm, the final norm): the add is fused ahead
    add_from: dict[str, str] = field(default_factory=dict)
    # the time of each module in ``modules`` per forward pass (what ``placement`` moves out of
    # the problem where ``apply`` cannot switch that module)
    module_time_us: dict[str, float] = field(default_factory=dict)
    # each module's calls per forward pass of each shape: module -> [[index into shapes, calls]]
    # (what ``placement`` takes out of the shapes where ``apply`` cannot switch that module)
    module_calls: dict[str, list[list[float]]] = field(default_factory=dict)


@dataclass
class UncoveredTime:
    name: str  # kernel or op name
    time_us: float
    fraction: float


@dataclass
class Plan:
    model: str  # the model spec as given
    device: str  # "cuda" | "cpu"
    time_kind: str  # "gpu" (device kernels) | "cpu" (CPU op time)
    dtype: str
    input_shape: list[int]
    total_time_us: float
    problems: list[PlanProblem]
    uncovered: list[UncoveredTime] = field(default_factory=list)
    device_name: str = ""
    created: str = ""
    version: int = PLAN_VERSION
    # how the model was built beyond its spec (``--config`` overrides, a padded batch): what
    # ``verify`` of a workdir made from this plan alone (``optimize --plan``) rebuilds it with
    config: dict[str, str] = field(default_factory=dict)
    padded: bool = False

    @property
    def supported(self) -> list[PlanProblem]:
        return [p for p in self.problems if p.supported]

    @property
    def covered_fraction(self) -> float:
        return sum(p.fraction for p in self.supported)

    @property
    def not_covered(self) -> list[UncoveredTime]:
        """All the time the supported problems leave, largest first: the unsupported problems
        (a kind found where ``apply`` cannot place it, ...) and the ops no problem covers."""
        items = [UncoveredTime(f"{p.name} ({p.kind or 'no kind'}, unsupported)", p.time_us, p.fraction)
                 for p in self.problems if not p.supported] + list(self.uncovered)
        return sorted(items, key=lambda u: (-u.fraction, u.name))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["covered_fraction"] = self.covered_fraction
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Plan":
        d = dict(d)
        d.pop("covered_fraction", None)
        d["problems"] = [PlanProblem(**p) for p in d.get("problems", [])]
        d["uncovered"] = [UncoveredTime(**u) for u in d.get("uncovered", [])]
        return cls(**d)


class PlanError(ValueError):
    """A plan file that cannot be read (user mistake, exit code 2)."""


def save_plan(plan: Plan, path: Path) -> None:
    path = Path(path)
    write_text_atomic(Path(path), json.dumps(plan.to_dict(), indent=2) + "\n")


def load_plan(path: Path) -> Plan:
    path = Path(path)
    if not path.is_file():
        raise PlanError(f"plan file not found: {path}")
    try:
        return Plan.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, KeyError) as exc:
        raise PlanError(f"{path} is not a valid plan.json: {exc}") from None
