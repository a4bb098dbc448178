"""The records of ``autokernel verify`` (``verify.json``) and the arithmetic that fills them:
Amdahl's prediction from the run's results, the time breakdown before/after per plan problem."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .integrate import as_float, best_rows
from .orchestrator import amdahl
from .plan import Plan

CPU_BREAKDOWN_NOTE = "kernels ran under the Triton interpreter: not GPU performance"


@dataclass
class KernelPrediction:
    problem: str
    kind: str
    fraction: float
    speedup_vs_eager: float | None
    speedup_vs_start: float | None
    amdahl_vs_eager: float | None  # 1/((1-f)+f/s) with s = speedup_vs_eager
    amdahl_vs_start: float | None  # the same with s = speedup_vs_start
    applied: bool


@dataclass
class BreakdownRow:
    problem: str
    kind: str
    before_us: float  # per forward pass, from plan.json
    after_us: float  # per forward pass, profiled on the patched model
    before_fraction: float
    after_fraction: float
    applied: bool  # the problem's kernel ran in the patched model
    after_op_us: float = 0.0  # the part of after_us spent in the problem's kernel (custom op)


@dataclass
class Breakdown:
    """Where a forward pass's time goes, per plan problem, before and after the run."""

    time_kind: str  # of the "after" profile: "gpu" (device kernels) | "cpu" (CPU op time)
    before_time_kind: str  # of the "before" profile
    rows: list[BreakdownRow] = field(default_factory=list)
    uncovered_before_us: float = 0.0  # time no plan problem covers ("not covered")
    uncovered_after_us: float = 0.0
    uncovered_before_fraction: float = 0.0
    uncovered_after_fraction: float = 0.0
    uncovered_after_top: list[tuple[str, float]] = field(default_factory=list)  # largest uncovered ops after
    total_before_us: float = 0.0
    total_after_us: float = 0.0
    warmup: int = 0
    iters: int = 0
    note: str = ""
    before_source: str = "plan.json"  # "original model" (profiled next to the patched one); older runs: the plan

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Breakdown":
        d = dict(d)
        d["rows"] = [BreakdownRow(**r) for r in d.get("rows", [])]
        d["uncovered_after_top"] = [(str(name), float(us)) for name, us in d.get("uncovered_after_top", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class VerifyResult:
    passed: bool
    model: str
    dtype: str
    device: str
    device_name: str = ""
    input_shape: list[int] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    tolerance: float = 0.0
    errors: list[float] = field(default_factory=list)  # relative-norm error per seed
    replaced: list[list[str]] = field(default_factory=list)  # [module, kind]
    skipped: list[list[str]] = field(default_factory=list)  # [problem or module, reason]
    op_calls: dict[str, int] = field(default_factory=dict)  # problem -> kernel calls per forward
    under_compile: dict[str, str] = field(default_factory=dict)  # problem -> what it runs under torch.compile, and why
    timing_kind: str = ""  # "gpu" | "cpu"
    timing_note: str = ""
    eager_ms: float | None = None
    patched_ms: float | None = None
    compile_ms: float | None = None
    compile_patched_ms: float | None = None
    compile_note: str = ""
    compile_mode: str = ""  # torch.compile's mode (or backend) of compile_ms and compile_patched_ms
    # the same models (eager, patched, compile, compile_patched) timed back to back and as GPU
    # work alone (model_timing.ForwardTimes; GPU only): the ms fields above are from idle
    back_to_back_ms: dict[str, float] = field(default_factory=dict)
    gpu_only_ms: dict[str, float] = field(default_factory=dict)
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    compile_patched_vs_compile: float | None = None
    # torch.compile of the patched model timed again with every op handed to inductor, when the
    # first timing (each op as under_compile=auto chose) was slower than of the original: what
    # apply(under_compile="auto") then follows (integrate.compile_policy.ModelChoice)
    compile_choice: dict[str, Any] | None = None
    # the patched model timed without each kernel, and the kernels it is faster without: what
    # apply(in_model="auto") leaves out (integrate.in_model.InModelChoice); None where not timed
    # and no earlier verify's choice was followed
    in_model_choice: dict[str, Any] | None = None
    predictions: list[KernelPrediction] = field(default_factory=list)
    predicted_vs_eager: float | None = None
    # a model that failed: each applied problem's kernel alone, its relative error on the worst
    # seed (which kernel the failure is owed to)
    errors_alone: dict[str, float] = field(default_factory=dict)
    # a half-precision model over the bound, measured against the original run in fp32
    # (verify_precision.FullPrecisionCheck as a dict): it passes where no further from fp32 than
    # the original is
    full_precision: dict[str, Any] | None = None
    breakdown: Breakdown | None = None
    message: str = ""
    created: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VerifyResult":
        d = dict(d)
        d["predictions"] = [KernelPrediction(**p) for p in d.get("predictions", [])]
        if d.get("breakdown") is not None:
            d["breakdown"] = Breakdown.from_dict(d["breakdown"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


def amdahl_many(parts: list[tuple[float, float]]) -> float:
    """Several disjoint parts ``(fraction, speedup)`` at once."""
    rest = 1.0 - sum(f for f, _ in parts)
    return 1.0 / (rest + sum(f / s for f, s in parts))


def predictions(plan: Plan, rows: list[dict[str, str]], applied: set[str]) -> tuple[list[KernelPrediction], float | None]:
    best = best_rows(rows)
    out, parts = [], []
    for p in plan.supported:
        row = best.get(p.name, {})
        s_e, s_s = as_float(row.get("speedup_vs_eager")), as_float(row.get("speedup_vs_start"))
        a_e = amdahl(p.fraction, s_e) if s_e else None
        a_s = amdahl(p.fraction, s_s) if s_s else None
        out.append(KernelPrediction(p.name, p.kind, p.fraction, s_e, s_s, a_e, a_s, p.name in applied))
        if p.name in applied and s_e:
            parts.append((p.fraction, s_e))
    total = amdahl_many(parts) if parts else None
    return out, total


def capped_shares(parts: list[float], total: float) -> list[float]:
    """``part / total`` for each part, each at most 1, summing to at most 1 (floating-point
    excess is taken off the largest share)."""
    shares = [min(1.0, max(0.0, x) / total) if total > 0 else 0.0 for x in parts]
    excess = sum(shares) - (1.0 - 1e-12)
    if shares and excess > 0:
        i = max(range(len(shares)), key=shares.__getitem__)
        shares[i] = max(0.0, shares[i] - excess)
    return shares


def top_ops(times: dict[str, float], n: int = 5) -> list[tuple[str, float]]:
    return sorted(times.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def make_breakdown(plan: Plan, after: Any, applied: set[str], before: Any) -> Breakdown:
    """``profiler.ProblemTimes`` of the original model (before) and of the patched one (after),
    per plan problem.  Both are profiled in the same verify: the plan's own times were measured
    earlier, under other conditions (clocks and temperature differ)."""
    names = [p.name for p in plan.problems]
    after_parts = [after.problems.get(n, 0.0) for n in names] + [after.uncovered_us]
    after_shares = capped_shares(after_parts, after.total_us)
    before_parts = [before.problems.get(n, 0.0) for n in names] + [before.uncovered_us]
    before_total, before_kind = before.total_us, before.time_kind
    before_shares = capped_shares(before_parts, before_total)
    rows = [BreakdownRow(problem=p.name, kind=p.kind, before_us=before_parts[i], after_us=after_parts[i],
                         before_fraction=before_shares[i], after_fraction=after_shares[i],
                         applied=p.name in applied, after_op_us=after.op_us.get(p.name, 0.0))
            for i, p in enumerate(plan.problems)]
    notes = []
    if after.time_kind != "gpu":
        notes.append(CPU_BREAKDOWN_NOTE)
    if after.time_kind != before_kind:
        notes.append(f"before is {before_kind} time and after is {after.time_kind} time: not comparable")
    return Breakdown(time_kind=after.time_kind, before_time_kind=before_kind, rows=rows,
                     uncovered_before_us=before_parts[-1], uncovered_after_us=after.uncovered_us,
                     uncovered_before_fraction=before_shares[-1], uncovered_after_fraction=after_shares[-1],
                     uncovered_after_top=top_ops(after.uncovered_ops),
                     total_before_us=before_total, total_after_us=after.total_us,
                     warmup=after.warmup, iters=after.iters, note="; ".join(notes),
                     before_source="original model")


def load_verify(workdir: str | Path) -> VerifyResult | None:
    path = Path(workdir) / "verify.json"
    if not path.is_file():
        return None
    try:
        return VerifyResult.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError):
        return None
