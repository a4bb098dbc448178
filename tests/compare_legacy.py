"""The comparison as it was before the fused rewrite (harness/compare.py at 0124d8c), frozen: the
oracle that tests/test_compare_pinned.py holds the rewritten torch path and the Triton path to.
Not used by the judge."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from autokernel.harness.compare import Verdict, is_exact_dtype
from autokernel.harness.memory import COMPARE_CHUNK_ELEMENTS as CHUNK_ELEMENTS
from autokernel.problems.base import Tolerance


def _unravel(flat: int, shape: tuple[int, ...]) -> str:
    pos = []
    for size in reversed(shape):
        pos.append(flat % size if size else 0)
        flat //= max(size, 1)
    return "[" + ",".join(str(p) for p in reversed(pos)) + "]"


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as (rows, last dimension); a 0-d tensor is one row of one element."""
    t = t.detach()
    if t.dim() == 0:
        return t.reshape(1, 1)
    return t.reshape(-1, t.shape[-1])


def _slices(rows: int, width: int, chunk: int):
    step = max(1, chunk // max(width, 1))
    for a in range(0, rows, step):
        yield a, min(rows, a + step)


def compare_exact(out: torch.Tensor, ref: torch.Tensor, chunk: int = CHUNK_ELEMENTS) -> Verdict:
    if out.numel() == 0:
        return Verdict(True, 0.0)
    o2, r2 = _rows(out), _rows(ref)
    width = r2.shape[1]
    n, first = 0, None
    for a, b in _slices(r2.shape[0], width, chunk):
        differ = o2[a:b].to(device=ref.device, dtype=torch.int64) != r2[a:b].to(torch.int64)
        k = int(differ.sum())
        if k and first is None:
            first = a * width + int(torch.nonzero(differ.reshape(-1))[0])
        n += k
    if not n:
        return Verdict(True, 0.0)
    return Verdict(False, math.inf, f"{n} of {out.numel()} integer elements differ from the reference (exact comparison); "
                   f"first at {_unravel(first, tuple(ref.shape))}: "
                   f"out {int(out.reshape(-1)[first])}, ref {int(ref.reshape(-1)[first])}")


@dataclass
class _Worst:
    """The largest error seen so far over the slices of a comparison."""

    elem: float = -1.0
    elem_at: int = 0
    elem_diff: float = 0.0
    elem_out: float = 0.0
    elem_ref: float = 0.0
    mass: float = 0.0
    mass_row: int = 0
    mass_out: float = 0.0
    mass_ref: float = 0.0
    sq_ref: float = 0.0
    sq_diff: float = 0.0
    finite: int = 0


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, chunk: int = CHUNK_ELEMENTS) -> Verdict:
    """Compare one output with its reference (already checked for shape), a slice of whole rows
    at a time (the temporaries stay near ``chunk`` elements whatever the output's size)."""
    ref = ref.detach()
    if is_exact_dtype(ref.dtype):
        return compare_exact(out, ref, chunk)
    work = ref.dtype if ref.dtype in (torch.float64, torch.float32) else torch.float32
    if out.numel() == 0:
        return Verdict(True, 0.0)
    o2, r2 = _rows(out), _rows(ref)
    width = r2.shape[1]
    bad_finite = mismatched = 0
    w = _Worst()
    zero = torch.zeros((), dtype=work, device=ref.device)
    for a, b in _slices(r2.shape[0], width, chunk):
        r = r2[a:b].to(work)
        o = o2[a:b].to(device=ref.device, dtype=work)
        r_fin = torch.isfinite(r)
        special = ~r_fin
        # every quantity of the slice as a 0-d tensor, read back in one transfer (one host sync
        # per slice instead of one per number); elements where the reference is not finite
        # count as zeros in the element and norm bounds, as if left out
        diff = torch.where(r_fin, (o - r).abs(), zero)
        ratio = (diff / (tol.atol + tol.rtol * torch.where(r_fin, r, zero).abs())).reshape(-1)
        idx = torch.argmax(ratio)
        parts = [(r_fin & ~torch.isfinite(o)).sum(), r_fin.sum(),
                 (special & ~((torch.isnan(r) & torch.isnan(o)) | (r == o))).sum(),
                 idx, ratio[idx], diff.reshape(-1)[idx], o.reshape(-1)[idx], r.reshape(-1)[idx],
                 torch.linalg.vector_norm(torch.where(r_fin, r, zero)), torch.linalg.vector_norm(diff)]
        if ref.dim() > 0:
            mass_ref = torch.where(r_fin, r.abs(), zero).sum(-1)
            mass_out = torch.where(r_fin, o.abs(), zero).sum(-1)
            frac = (mass_out - mass_ref).abs() / (tol.rtol * mass_ref + tol.atol)
            row = torch.argmax(frac)
            parts += [row, frac[row], mass_out[row], mass_ref[row]]
        values = torch.stack([p.to(torch.float64) for p in parts]).tolist()
        bad, finite, special_bad = int(values[0]), int(values[1]), int(values[2])
        bad_finite += bad
        if bad_finite:
            continue  # only counting now: the verdict is decided
        mismatched += special_bad
        if finite:
            elem = values[4]
            if elem > w.elem or w.elem < 0:
                w.elem, w.elem_at = elem, a * width + int(values[3])
                w.elem_diff, w.elem_out, w.elem_ref = values[5], values[6], values[7]
            w.sq_ref += values[8] ** 2
            w.sq_diff += values[9] ** 2
            w.finite += finite
        if ref.dim() > 0 and values[11] > w.mass:
            w.mass, w.mass_row = values[11], a + int(values[10])
            w.mass_out, w.mass_ref = values[12], values[13]
    if bad_finite:
        return Verdict(False, math.inf, f"{bad_finite} of {out.numel()} elements are NaN/inf where the reference is finite",
                       nonfinite=bad_finite)
    if mismatched:
        return Verdict(False, math.inf, f"{mismatched} elements differ where the reference is NaN/inf")
    if w.finite == 0:
        return Verdict(True, 0.0)
    # The reference's norm is floored at atol * sqrt(n) (an RMS of atol): below the absolute
    # tolerance a relative error means nothing (an output of 1e-33 where the truth is 2e-33).
    norm_ref = max(math.sqrt(w.sq_ref), tol.atol * math.sqrt(w.finite))
    norm_diff = math.sqrt(w.sq_diff)
    if norm_ref > 0:
        rel = norm_diff / norm_ref
        norm_frac = rel / tol.max_rel_norm if tol.max_rel_norm > 0 else (math.inf if rel > 0 else 0.0)
    else:
        rel = norm_diff
        norm_frac = math.inf if norm_diff > 0 else 0.0
    worst = max(w.elem, norm_frac, w.mass)
    if worst <= 1.0:
        return Verdict(True, worst)
    if w.mass > max(w.elem, norm_frac):
        message = (f"row {w.mass_row}: the sum of |out| is {w.mass_out:.4g} where the reference's is "
                   f"{w.mass_ref:.4g} (an output of the wrong magnitude), {w.mass:.3g}x the bound "
                   f"rtol * sum|ref| + atol = {tol.rtol * w.mass_ref + tol.atol:.3g}")
    elif w.elem >= norm_frac:
        message = (f"max error {w.elem_diff:.3g} at {_unravel(w.elem_at, tuple(ref.shape))} (out {w.elem_out:.6g}, "
                   f"ref {w.elem_ref:.6g}) is {w.elem:.3g}x the bound atol={tol.atol:g} rtol={tol.rtol:g}")
    else:
        message = f"relative norm error {rel:.3g} is {norm_frac:.3g}x the bound {tol.max_rel_norm:g}"
    return Verdict(False, worst, message)
