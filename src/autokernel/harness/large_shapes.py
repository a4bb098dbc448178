"""Large shapes, judged cheaply on sampled rows (part of the held-out stage; parent side).

The target, edge and held-out shapes stay near what the agent saw, so a kernel can be wrong
only where no drawn shape reaches: rows past a bound it never writes (``M = min(M, 16384)``),
offsets computed in 32 bits that wrap past 2**31 elements.  For problems whose first dimension
is ``M`` and whose only other free dimension is the row (reduce, softmax, the norms, the gated
activations; not matmul, whose rows cost a matmul each), or that say what their rows are
(``Problem.rows``: moe_experts' tokens, each adding K hidden rows of I), and whose outputs are
row-wise (each output's first dimension is the rows too, checked on a three-row draw), the judge
draws two more shapes, each at the first dtype, at the target shape with the narrowest rows:

``large-rows``   rows past ``large_rows`` (and past twice the largest target's), odd;
``index-width``  a row beginning past ``index_elements`` elements of the widest buffer (2**31 on a
                 GPU: a 32-bit offset wraps), when the device has the memory for it.

The kernel runs on the whole input, as every call does (watched, poisoned, its inputs checked),
and its output comes back whole; the reference runs only on sampled rows (the first, the last
eight, rows at powers of two, random ones), and only those rows are compared.  The bounds are
per device (``LARGE_ROWS``, ``INDEX_ELEMENTS``, read when the stage runs); the interpreter is too
slow for either, so on the CPU both are off unless a caller sets them (tests do, small).
"""
from __future__ import annotations

import math
import random
from typing import Any

import torch

from ..problems.base import Problem, Rows, Shape, format_shape
from . import compare

LARGE_ROWS = {"gpu": 1 << 17, "cpu": None}
INDEX_ELEMENTS = {"gpu": 1 << 31, "cpu": None}
RANDOM_ROWS = 32
LAST_ROWS = 8
MEMORY_FACTOR = 5  # device memory needed: this many times the problem's bytes at the shape


def bounds(device: str) -> tuple[int | None, int | None]:
    key = "gpu" if device.startswith("cuda") else "cpu"
    return LARGE_ROWS[key], INDEX_ELEMENTS[key]


def per_row(problem: Problem, shape: Shape) -> int:
    return math.prod(max(v, 1) for k, v in shape.items() if k != "M" and k not in problem.fixed_dims)


def row_layout(problem: Problem) -> Rows | None:
    """The problem's rows: its own (``Problem.rows``), else ``M`` when the only other free
    dimension is the row's width, else None (no large shapes)."""
    if problem.rows is not None:
        return problem.rows
    free = [d for d in problem.dims if d not in problem.fixed_dims]
    if len(free) == 2 and free[0] == "M":
        return Rows("M", lambda shape: per_row(problem, shape))
    return None


def large_shapes(problem: Problem, shapes: list[Shape], rng: random.Random, large_rows: int | None,
                 index_elements: int | None) -> list[tuple[str, Shape]]:
    """The large shapes to draw, named; none unless the problem has rows (``row_layout``)."""
    rows = row_layout(problem)
    if rows is None or not shapes or any(rows.dim not in s for s in shapes):
        return []
    base = min(shapes, key=rows.width)
    width = rows.width(base)
    out = []
    if large_rows is not None:
        m = max(large_rows, 2 * max(s[rows.dim] for s in shapes)) + 1 + 2 * rng.randrange(32)
        out.append(("large-rows", dict(base, **{rows.dim: m})))
    if index_elements is not None:
        # a row beginning at or past the bound, not only more elements: 103 rows of 40 hold 4120
        # elements, yet the last begins at 4080, so a kernel whose row offsets wrap at 4096 passed
        m = -(-index_elements // width) + 1 + 2 * rng.randrange(32)
        out.append(("index-width", dict(base, **{rows.dim: m})))
    return out


def sampled_rows(m: int, rng: random.Random) -> list[int]:
    """Rows to compare: the first two, the last ``LAST_ROWS``, the rows around each power of two
    (where a bound or an offset width would bite), and ``RANDOM_ROWS`` random ones."""
    rows = {0, 1} | {m - 1 - i for i in range(LAST_ROWS)}
    for k in range(4, 63):
        if (1 << k) >= m:
            break
        rows |= {(1 << k) - 1, 1 << k}
    rows |= {rng.randrange(m) for _ in range(RANDOM_ROWS)}
    return sorted(r for r in rows if 0 <= r < m)


def rows_of(args: Any, m: int, index: torch.Tensor) -> Any:
    """``args`` with every tensor whose first dimension is ``m`` cut to the rows ``index``."""
    if isinstance(args, torch.Tensor):
        return args.index_select(0, index) if args.dim() >= 1 and args.shape[0] == m else args
    if isinstance(args, (tuple, list)):
        return type(args)(rows_of(a, m, index) for a in args)
    return args


def row_wise(judge, shape: Shape, dtype: torch.dtype) -> bool:
    """Does every output of the reference have the inputs' rows as its first dimension (on a
    three-row draw)?"""
    from .stages import upcast

    small = dict(shape, **{row_layout(judge.problem).dim: 3})
    args = tuple(judge.problem.make_inputs(small, dtype, judge.device, judge.next_seed()))
    with torch.no_grad():
        meta = compare.output_meta(judge.problem.reference(*upcast(args, dtype)))
    return all(s and s[0] == 3 for s in meta.shapes)


def fits_in_memory(problem: Problem, shape: Shape, dtype: torch.dtype, device: str) -> bool:
    if not device.startswith("cuda"):
        return True
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return MEMORY_FACTOR * problem.bytes(shape, dtype) < free


def run_whole(judge, case, meta: compare.OutputMeta) -> tuple:
    """One judged call on ``case`` (watched, poisoned, its inputs' bits checked against a
    clone) with outputs of the shapes ``meta`` names, returned whole and not compared."""
    from .stages import NAN_POISON, tensors_of

    before = judge.snapshot(tensors_of(case.args), exact=True)
    outs = judge.judged_request([case], 1, [before], NAN_POISON, collect=True, meta=meta)[0]
    del before
    return outs


def run(judge, plan, tally, rng: random.Random) -> list[str]:
    """Judge the large shapes; one note per shape (checked or skipped, and why)."""
    from .stages import Case, CaseFailure

    from .stages import upcast

    large_rows, index_elements = bounds(judge.device)
    notes = []
    dtype = plan.dtypes[0]
    drawn = large_shapes(judge.problem, plan.shapes, rng, large_rows, index_elements)
    if drawn and not row_wise(judge, drawn[0][1], dtype):
        return ["large shapes skipped: the outputs are not row-wise"]
    for name, shape in drawn:
        if not fits_in_memory(judge.problem, shape, dtype, judge.device):
            notes.append(f"{name} {format_shape(shape)} skipped: not enough device memory")
            continue
        case = judge.make_case(shape, dtype)
        case = Case(case.shape, case.dtype, case.args, name)
        m = shape[row_layout(judge.problem).dim]
        rows = sampled_rows(m, rng)
        index = torch.tensor(rows, dtype=torch.long, device=judge.device)
        sub_args = rows_of(case.args, m, index)
        with torch.no_grad():
            sub_meta = compare.output_meta(judge.problem.reference(*upcast(sub_args, dtype)))
        if any(not s or s[0] != len(rows) for s in sub_meta.shapes):
            notes.append(f"{name} skipped: the outputs are not row-wise")
            continue
        full_meta = compare.OutputMeta(tuple((m,) + tuple(s[1:]) for s in sub_meta.shapes), sub_meta.dtypes)
        outs = run_whole(judge, case, full_meta)
        sub_outs = tuple(o.index_select(0, index) for o in outs)
        refs = judge.reference(sub_args)
        verdict = compare.compare_outputs(sub_outs, refs, sub_meta, judge.problem.tolerance(dtype))
        label = f"{case.label} ({len(rows)} sampled rows, the last {LAST_ROWS} included)"
        tally.add(verdict, label)
        if not verdict.ok:
            raise CaseFailure(verdict.message, label, verdict.worst_error)
        notes.append(f"{name} {format_shape(shape)} ({len(rows)} sampled rows)")
        del case, sub_args, outs, sub_outs, refs
        if judge.gpu:  # gigabytes this process will not need again at this size
            torch.cuda.empty_cache()
    return notes
