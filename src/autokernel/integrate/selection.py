"""Which of a run's kernels may be applied, and why the others are not."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ..loop.results import failure_text, timed_out
from ..plan import Plan, PlanProblem
from ..problems.base import parse_dtype
from .ops import SCHEMAS, register_kernel_op
from .runfiles import as_float, best_rows, judged_correct, kernel_path, read_results


# ------------------------------------------------------------------ what may be applied
@dataclass
class KernelOp:
    problem: PlanProblem
    opname: str
    op: Callable[..., Any]
    dtype: torch.dtype
    path: Path
    best_us: float | None = None  # the score of its best row in results.tsv (None: no results)

    @property
    def kind(self) -> str:
        return self.problem.kind

    @property
    def identity(self) -> tuple[str, torch.dtype]:
        """What a switched class's members depend on: the same file registers one op for every
        dtype, and the members test the dtype they were made for."""
        return self.opname, self.dtype

    def dims(self, dim: str) -> set[int]:
        return {s[dim] for s in self.problem.shapes if dim in s}

    def head_dims(self) -> set[tuple[int, int]]:
        """The (q/k head dim, v head dim) pairs its kernel was judged at: (D, D) but where a shape
        has a value head dim Dv of its own (multi-head latent attention)."""
        return {(s[d], s.get("Dv", s[d])) for s in self.problem.shapes for d in ("D", "head_dim") if d in s}


@dataclass
class Selection:
    ops: list[KernelOp] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def select_kernels(workdir: Path, plan: Plan, *, device: torch.device,
                   allow_slower: bool = False) -> Selection:
    """Which problems' best kernels are applied, and why the others are not.  When the workdir
    has results (a run of the loop), a problem needs a correct (timed) best row in them; a
    workdir without ``results.tsv`` (put together by hand) applies every kernel file it has."""
    sel = Selection()
    results = read_results(workdir)
    best = best_rows(results)
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        for p in plan.supported:
            sel.skipped.append((p.name, "the model is on CPU and TRITON_INTERPRET=1 is not set"))
        return sel
    for p in plan.problems:
        if not p.supported or p.kind not in SCHEMAS:
            sel.skipped.append((p.name, unsupported_reason(p)))
            continue
        path = kernel_path(workdir, p.name)
        if not path.is_file():
            sel.skipped.append((p.name, f"no kernel at {path}"))
            continue
        row = best.get(p.name)
        if not judged_correct(results, best, p.name):
            sel.skipped.append((p.name, not_judged_correct(results, p.name, plan.time_kind != "gpu")))
            continue
        if p.kind == "matmul" and not (row and row.get("status") == "keep"
                                       and (as_float(row.get("speedup_vs_start")) or 0) > 1.0):
            sel.skipped.append((p.name, matmul_left_out(results, row, plan.time_kind != "gpu")))
            continue
        s_eager = as_float(row.get("speedup_vs_eager")) if row else None
        best_us = as_float(row.get("latency_us")) if row else None
        if (plan.time_kind == "gpu" and not allow_slower and s_eager is not None and s_eager < 1.0
                and not beats_the_model(best_us, p)):
            sel.skipped.append((p.name, f"best kernel is slower than PyTorch eager ({s_eager:.2f}x) and than what "
                                        f"the model runs there ({best_us or 0:.1f} against {p.time_us:.1f} us a forward)"))
            continue
        try:
            dtype = parse_dtype(p.dtype)
        except ValueError as exc:
            sel.skipped.append((p.name, str(exc)))
            continue
        opname, op = register_kernel_op(p.kind, p.name, path)
        sel.ops.append(KernelOp(p, opname, op, dtype, path, best_us))
    return sel


def timeout_text(interpreter: bool) -> str:
    """What a timed-out evaluation means, for a skip reason."""
    return ("the interpreter is too slow for these shapes, " if interpreter else "") + "not a verdict on the kernel"


def not_judged_correct(results: list[dict[str, str]], name: str, interpreter: bool = False) -> str:
    """Why a problem has no kernel the harness passed: never evaluated, every evaluation timed
    out (no verdict), or failed.  ``interpreter``: the run's kernels ran under the Triton
    interpreter (a CPU plan), where a timeout is the interpreter's slowness."""
    rows = [r for r in results if r.get("problem") == name]
    if not rows:
        return "never evaluated: the run's budget ended before its turn (--extend gives it time)"
    if all(timed_out(r) for r in rows):
        return (f"no kernel judged: its evaluation timed out ({len(rows)} evaluation(s); "
                f"{timeout_text(interpreter)})")
    stages = sorted({failure_text(r) for r in rows} - {""})
    return (f"no correct kernel recorded in results.tsv ({len(rows)} evaluation(s); failed at: "
            f"{', '.join(stages) or 'no stage recorded'})")


NO_PLACE = "no place in the model where it applies"
# a problem placed whose op took fewer calls than planned in the placement check's forward
DECLINED = "placed, but its op does not take all its calls"


def unsupported_reason(p: PlanProblem) -> str:
    """Why an unsupported problem stays out: a built-in kind that the profile's placement check found
    no place for says so, with where it was found (its note); cohere2's rotary_table, a kind
    autokernel supports, read "not supported by autokernel"."""
    if p.kind in SCHEMAS and (NO_PLACE in p.note or DECLINED in p.note):
        return p.note.removeprefix(f"{p.kind}: ")
    return "not supported by autokernel"


def matmul_left_out(results: list[dict[str, str]], row: dict[str, str] | None, interpreter: bool = False) -> str:
    """Why a matmul kernel stays out: cuBLAS is the bar, and only a kept kernel faster than the
    starting one is taken; a start that failed or timed out gives nothing to compare with.  The reason
    does not name the problem: it is shown after it ("skipped matmul: matmul: no kept..." before)."""
    name = row.get("problem", "") if row else ""
    start = next((r for r in results if r.get("problem") == name and r.get("status") == "baseline"), None)
    if row and row.get("status") == "keep" and (start is None or as_float(start.get("latency_us")) is None):
        how = ""
        if start is not None and timed_out(start):
            how = f" (its evaluation timed out: {timeout_text(interpreter)})"
        elif start is not None and start.get("failed_stage"):
            how = f" (it failed at {start.get('failed_stage')})"
        return f"the starting kernel has no time to compare the kept one with{how}"
    library = "the CPU's BLAS library (cuBLAS on a GPU)" if interpreter else "cuBLAS"
    return ("no kept kernel faster than the starting kernel (a matmul kernel goes in only when the loop "
            f"improved on its start: the model's own matmul is {library})")


def beats_the_model(best_us: float | None, problem: PlanProblem) -> bool:
    """Whether a kernel's score (its time per forward: the judge weights each shape by its calls
    per forward, with a cold L2 before every call) is below what the profiler measured the
    model's own ops at that place take per forward.  The problem's eager op is one way to write
    the computation; a model may write it in many more ops (GPT-2's GELU is eight element-wise
    kernels, where the linear_gelu problem's eager op is addmm and one GELU), and the kernel
    replaces what the model runs, not the problem's eager op."""
    return best_us is not None and problem.time_us > 0 and best_us < problem.time_us
