"""Compare a kernel's outputs with the high-precision reference.  Pure functions.

Rules (DESIGN §5), for every output tensor:

* count, shape and dtype must equal those of the eager reference (``problem.reference`` on
  the inputs as given);
* where the reference is finite the output must be finite (a NaN or inf there fails);
  where the reference is NaN the output must be NaN, where it is ±inf the output must equal it;
* element-wise ``|out - ref| <= atol + rtol * |ref|``;
* whole tensor ``||out - ref|| / ||ref|| <= max_rel_norm`` over the finite elements, with
  ``||ref||`` floored at ``atol * sqrt(n)`` (a reference whose RMS is below the absolute
  tolerance, e.g. all zeros or underflowing values, is judged at that floor);
* per row (the last dimension; a 1-D output is one row), the magnitude:
  ``| sum|out_row| - sum|ref_row| | <= rtol * sum|ref_row| + atol``.  The two bounds above
  admit an error of ``atol`` per element, so a row whose every element is below ``atol`` could
  be anything, all zeros included (a softmax row of width 50257 holds probabilities near
  2e-5); its total mass cannot hide (that row's mass is 1).  An honest kernel's errors have
  random signs and cancel in the row sum, so the bound is loose for it.
* integer and boolean outputs (indices, counts, masks) must be equal, element for element.

``worst_error`` is the largest observed error as a fraction of its bound: <= 1 passes.  The
difference is computed in the reference's precision (float64 on CPU, float32 on GPU).

How: ``torch_findings`` (PyTorch ops, a slice of whole rows at a time) is the definition; on a
GPU ``compare_kernel`` computes the same ``Findings`` in one Triton pass (the element ratios bit
for bit, the norm and row-mass sums in float64).  ``verdict_of`` turns either into the verdict.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..problems.base import Tolerance, dtype_name

from .memory import COMPARE_CHUNK_ELEMENTS as CHUNK_ELEMENTS  # elements per slice of a comparison

FUSED_DEVICE_TYPES = ("cuda",)  # where compare_kernel compares (tests add "cpu" with TRITON_INTERPRET=1)


@dataclass(frozen=True)
class OutputMeta:
    """What the eager reference returned: one (shape, dtype) per output tensor."""

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[torch.dtype, ...]


@dataclass
class Verdict:
    ok: bool
    worst_error: float  # fraction of the allowed bound; inf when something is not finite
    message: str = ""
    nonfinite: int = 0  # elements that are NaN/inf in the output but finite in the reference


def as_tuple(value: Any) -> tuple:
    if isinstance(value, (tuple, list)):
        return tuple(value)
    return (value,)


def output_meta(value: Any) -> OutputMeta:
    outs = as_tuple(value)
    return OutputMeta(tuple(tuple(o.shape) for o in outs), tuple(o.dtype for o in outs))


def check_meta(outs: Sequence[Any], meta: OutputMeta) -> str | None:
    """A message when the outputs' count, types, shapes or dtypes differ from the eager
    reference's, else None."""
    if len(outs) != len(meta.shapes):
        return f"kernel returned {len(outs)} output(s); the reference returns {len(meta.shapes)}"
    for i, (out, shape, dtype) in enumerate(zip(outs, meta.shapes, meta.dtypes)):
        label = f"output {i}" if len(outs) > 1 else "output"
        if not isinstance(out, torch.Tensor):
            return f"{label} is a {type(out).__name__}, not a tensor"
        if tuple(out.shape) != shape:
            return f"{label} has shape {list(out.shape)}; expected {list(shape)}"
        if out.dtype != dtype:
            return f"{label} has dtype {dtype_name(out.dtype)}; expected {dtype_name(dtype)}"
    return None


def is_exact_dtype(dtype: torch.dtype) -> bool:
    """Integer and boolean values are compared exactly: there is no rounding to allow for."""
    return not (dtype.is_floating_point or dtype.is_complex)


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
    same = out.dtype == ref.dtype and out.device == ref.device
    n, first = 0, None
    for a, b in _slices(r2.shape[0], width, chunk):
        if same:
            differ = o2[a:b] != r2[a:b]
        else:
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
class Findings:
    """What the comparison of one output found, over all its elements: the numbers its verdict
    is stated in.  Elements where the reference is not finite count as zeros in the element,
    norm and row-mass bounds (as if left out)."""

    bad_finite: int = 0  # elements NaN/inf in the output where the reference is finite
    mismatched: int = 0  # elements where the reference is NaN/inf and the output differs from it
    finite: int = 0  # elements where the reference is finite
    elem: float = -1.0  # the largest |out - ref| / (atol + rtol * |ref|), first position on ties
    elem_at: int = 0  # its flat position
    elem_diff: float = 0.0
    elem_out: float = 0.0
    elem_ref: float = 0.0
    sq_ref: float = 0.0  # sum of ref**2 and of (out - ref)**2
    sq_diff: float = 0.0
    mass: float = 0.0  # the largest |sum|out_row| - sum|ref_row|| / (rtol * sum|ref_row| + atol), first row on ties
    mass_row: int = 0
    mass_out: float = 0.0
    mass_ref: float = 0.0


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, chunk: int = CHUNK_ELEMENTS) -> Verdict:
    """Compare one output with its reference (already checked for shape).  On a GPU one fused
    pass over the tensor (compare_kernel.py) where it applies, else a slice of whole rows at a
    time (the temporaries stay near ``chunk`` elements whatever the output's size)."""
    ref = ref.detach()
    if is_exact_dtype(ref.dtype):
        return compare_exact(out, ref, chunk)
    if out.numel() == 0:
        return Verdict(True, 0.0)
    if ref.device.type in FUSED_DEVICE_TYPES:
        from . import compare_kernel

        if compare_kernel.applies(out, ref, tol):
            found = compare_kernel.findings_or_none(_rows(out), _rows(ref), tol, ref.dim() > 0)
            if found is not None:
                return verdict_of(found, tol, ref)
    return verdict_of(torch_findings(out, ref, tol, chunk), tol, ref)


def torch_findings(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, chunk: int = CHUNK_ELEMENTS) -> Findings:
    """``Findings`` with PyTorch ops, a slice of whole rows at a time, in the reference's
    precision (float32 for lower ones): the definition, used on the CPU and wherever the
    fused pass does not apply.  One host sync per slice (two where the reference has NaN/inf)."""
    work = ref.dtype if ref.dtype in (torch.float64, torch.float32) else torch.float32
    o2, r2 = _rows(out), _rows(ref.detach())
    width = r2.shape[1]
    rows = ref.dim() > 0
    f = Findings()
    zero = torch.zeros((), dtype=work, device=ref.device)
    for a, b in _slices(r2.shape[0], width, chunk):
        r = r2[a:b].to(work)
        o = o2[a:b].to(device=ref.device, dtype=work)
        r_fin = torch.isfinite(r)
        rz = torch.where(r_fin, r, zero)
        diff = torch.where(r_fin, (o - r).abs_(), zero)
        r_abs = rz.abs()
        # no difference is no error, where the bound underflows to 0 too (atol 0: exact problems at
        # values near the smallest normal) and 0 / 0 would read as NaN
        ratio = torch.where(diff == 0, zero, diff / r_abs.mul(tol.rtol).add_(tol.atol)).reshape(-1)
        idx = torch.argmax(ratio)
        ints = [(r_fin & ~torch.isfinite(o)).sum(), r_fin.sum(), idx]
        floats = [ratio[idx], diff.reshape(-1)[idx], o.reshape(-1)[idx], r.reshape(-1)[idx],
                  torch.linalg.vector_norm(rz), torch.linalg.vector_norm(diff)]
        if rows:
            mass_ref = r_abs.sum(-1)
            mass_out = torch.where(r_fin, o.abs(), zero).sum(-1)
            off = (mass_out - mass_ref).abs_()
            frac = torch.where(off == 0, zero, off / mass_ref.mul(tol.rtol).add_(tol.atol))
            row = torch.argmax(frac)
            ints.append(row)
            floats += [frac[row], mass_out[row], mass_ref[row]]
        values = torch.cat([torch.stack(ints).to(torch.float64), torch.stack(floats).to(torch.float64)]).tolist()
        counts, numbers = [int(v) for v in values[:len(ints)]], values[len(ints):]
        bad, finite, at = counts[:3]
        f.bad_finite += bad
        if f.bad_finite:
            continue  # only counting now: the verdict is decided
        if finite < (b - a) * width:
            f.mismatched += _mismatched(o, r, r_fin)
        elem, elem_diff, elem_out, elem_ref, norm_ref, norm_diff = numbers[:6]
        if finite:
            if elem > f.elem or f.elem < 0:
                f.elem, f.elem_at = elem, a * width + at
                f.elem_diff, f.elem_out, f.elem_ref = elem_diff, elem_out, elem_ref
            f.sq_ref += norm_ref ** 2
            f.sq_diff += norm_diff ** 2
            f.finite += finite
        if rows and numbers[6] > f.mass:
            f.mass, f.mass_row = numbers[6], a + counts[3]
            f.mass_out, f.mass_ref = numbers[7], numbers[8]
    return f


def _mismatched(o: torch.Tensor, r: torch.Tensor, r_fin: torch.Tensor) -> int:
    """Elements where the reference is NaN/inf and the output is not the same NaN/inf."""
    agree = (torch.isnan(r) & torch.isnan(o)) | (r == o)
    return int((~r_fin & ~agree).sum())


def verdict_of(f: Findings, tol: Tolerance, ref: torch.Tensor) -> Verdict:
    if f.bad_finite:
        return Verdict(False, math.inf, f"{f.bad_finite} of {ref.numel()} elements are NaN/inf where the reference is finite",
                       nonfinite=f.bad_finite)
    if f.mismatched:
        return Verdict(False, math.inf, f"{f.mismatched} elements differ where the reference is NaN/inf")
    if f.finite == 0:
        return Verdict(True, 0.0)
    # The reference's norm is floored at atol * sqrt(n) (an RMS of atol): below the absolute
    # tolerance a relative error means nothing (an output of 1e-33 where the truth is 2e-33).
    norm_ref = max(math.sqrt(f.sq_ref), tol.atol * math.sqrt(f.finite))
    norm_diff = math.sqrt(f.sq_diff)
    if norm_ref > 0:
        rel = norm_diff / norm_ref
        norm_frac = rel / tol.max_rel_norm if tol.max_rel_norm > 0 else (math.inf if rel > 0 else 0.0)
    else:
        rel = norm_diff
        norm_frac = math.inf if norm_diff > 0 else 0.0
    worst = max(f.elem, norm_frac, f.mass)
    if worst <= 1.0:
        return Verdict(True, worst)
    if f.mass > max(f.elem, norm_frac):
        message = (f"row {f.mass_row}: the sum of |out| is {f.mass_out:.4g} where the reference's is "
                   f"{f.mass_ref:.4g} (an output of the wrong magnitude), {f.mass:.3g}x the bound "
                   f"rtol * sum|ref| + atol = {tol.rtol * f.mass_ref + tol.atol:.3g}")
    elif f.elem >= norm_frac:
        message = (f"max error {f.elem_diff:.3g} at {_unravel(f.elem_at, tuple(ref.shape))} (out {f.elem_out:.6g}, "
                   f"ref {f.elem_ref:.6g}) is {f.elem:.3g}x the bound atol={tol.atol:g} rtol={tol.rtol:g}")
    else:
        message = f"relative norm error {rel:.3g} is {norm_frac:.3g}x the bound {tol.max_rel_norm:g}"
    return Verdict(False, worst, message)


def compare_outputs(outs: Any, refs: Any, meta: OutputMeta, tol: Tolerance, chunk: int = CHUNK_ELEMENTS) -> Verdict:
    """Compare a kernel's outputs (tensor or tuple) with the high-precision references."""
    outs, refs = as_tuple(outs), as_tuple(refs)
    problem = check_meta(outs, meta)
    if problem:
        return Verdict(False, math.inf, problem)
    worst = 0.0
    nonfinite = 0
    for i, (out, ref) in enumerate(zip(outs, refs)):
        v = compare_tensor(out, ref, tol, chunk)
        nonfinite += v.nonfinite
        if not v.ok:
            prefix = f"output {i}: " if len(outs) > 1 else ""
            return Verdict(False, v.worst_error, prefix + v.message, nonfinite=nonfinite)
        worst = max(worst, v.worst_error)
    return Verdict(True, worst)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Identical bits (NaN payloads and signed zeros included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    if a.is_floating_point() or a.is_complex():
        as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))
    return torch.equal(a, b)


def count_differing(a: torch.Tensor, b: torch.Tensor) -> int:
    if a.is_floating_point():
        as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return int((a.contiguous().view(as_int) != b.contiguous().view(as_int)).sum())
    return int((a != b).sum())
