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
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..problems.base import Tolerance, dtype_name


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


def compare_exact(out: torch.Tensor, ref: torch.Tensor) -> Verdict:
    out = out.detach().to(device=ref.device)
    if out.numel() == 0:
        return Verdict(True, 0.0)
    differ = out.to(torch.int64) != ref.detach().to(torch.int64)
    n = int(differ.sum())
    if not n:
        return Verdict(True, 0.0)
    k = int(torch.nonzero(differ.reshape(-1))[0])
    return Verdict(False, math.inf, f"{n} of {out.numel()} integer elements differ from the reference (exact comparison); "
                   f"first at {_position(differ.new_ones(differ.shape), k, tuple(differ.shape))}: "
                   f"out {int(out.reshape(-1)[k])}, ref {int(ref.reshape(-1)[k])}")


def row_mass_error(out: torch.Tensor, ref: torch.Tensor, finite: torch.Tensor, tol: Tolerance) -> tuple[float, str]:
    """Largest ``| sum|out_row| - sum|ref_row| |`` as a fraction of ``rtol * sum|ref_row| + atol``
    over the rows (last dimension) of the finite elements, with a message for the worst row."""
    if ref.dim() == 0:
        return 0.0, ""
    width = ref.shape[-1]
    zero = torch.zeros((), dtype=ref.dtype, device=ref.device)
    mass_ref = torch.where(finite, ref.abs(), zero).reshape(-1, width).sum(-1)
    mass_out = torch.where(finite, out.abs(), zero).reshape(-1, width).sum(-1)
    frac = (mass_out - mass_ref).abs() / (tol.rtol * mass_ref + tol.atol)
    row = int(torch.argmax(frac))
    worst = float(frac[row])
    return worst, (f"row {row}: the sum of |out| is {float(mass_out[row]):.4g} where the reference's is "
                   f"{float(mass_ref[row]):.4g} (an output of the wrong magnitude), {worst:.3g}x the bound "
                   f"rtol * sum|ref| + atol = {float(tol.rtol * mass_ref[row] + tol.atol):.3g}")


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Verdict:
    """Compare one output with its reference (already checked for shape)."""
    ref = ref.detach()
    if is_exact_dtype(ref.dtype):
        return compare_exact(out, ref)
    work = ref.dtype if ref.dtype in (torch.float64, torch.float32) else torch.float32
    ref = ref.to(work)
    out = out.detach().to(device=ref.device, dtype=work)
    if out.numel() == 0:
        return Verdict(True, 0.0)
    ref_finite = torch.isfinite(ref)
    out_finite = torch.isfinite(out)
    bad_finite = int((ref_finite & ~out_finite).sum())
    if bad_finite:
        return Verdict(False, math.inf, f"{bad_finite} of {out.numel()} elements are NaN/inf where the reference is finite",
                       nonfinite=bad_finite)
    if not bool(ref_finite.all()):
        special = ~ref_finite
        ref_s, out_s = ref[special], out[special]
        same = (torch.isnan(ref_s) & torch.isnan(out_s)) | (ref_s == out_s)
        mismatched = int((~same).sum())
        if mismatched:
            return Verdict(False, math.inf, f"{mismatched} elements differ where the reference is NaN/inf")
    ref_f, out_f = ref[ref_finite], out[ref_finite]
    if ref_f.numel() == 0:
        return Verdict(True, 0.0)
    diff = (out_f - ref_f).abs()
    bound = tol.atol + tol.rtol * ref_f.abs()
    ratio = diff / bound
    idx = int(torch.argmax(ratio))
    elem = float(ratio.reshape(-1)[idx])
    # The reference's norm is floored at atol * sqrt(n) (an RMS of atol): below the absolute
    # tolerance a relative error means nothing (an output of 1e-33 where the truth is 2e-33).
    norm_ref = max(float(torch.linalg.vector_norm(ref_f)), tol.atol * math.sqrt(ref_f.numel()))
    norm_diff = float(torch.linalg.vector_norm(diff))
    if norm_ref > 0:
        rel = norm_diff / norm_ref
        norm_frac = rel / tol.max_rel_norm if tol.max_rel_norm > 0 else (math.inf if rel > 0 else 0.0)
    else:
        rel = norm_diff
        norm_frac = math.inf if norm_diff > 0 else 0.0
    mass_frac, mass_message = row_mass_error(out, ref, ref_finite, tol)
    worst = max(elem, norm_frac, mass_frac)
    if worst <= 1.0:
        return Verdict(True, worst)
    if mass_frac > max(elem, norm_frac):
        message = mass_message
    elif elem >= norm_frac:
        flat_pos = _position(ref_finite, idx, tuple(ref.shape))
        message = (f"max error {float(diff.reshape(-1)[idx]):.3g} at {flat_pos} (out {float(out_f.reshape(-1)[idx]):.6g}, "
                   f"ref {float(ref_f.reshape(-1)[idx]):.6g}) is {elem:.3g}x the bound atol={tol.atol:g} rtol={tol.rtol:g}")
    else:
        message = f"relative norm error {rel:.3g} is {norm_frac:.3g}x the bound {tol.max_rel_norm:g}"
    return Verdict(False, worst, message)


def _position(mask: torch.Tensor, k: int, shape: tuple[int, ...]) -> str:
    """Index (in the full tensor) of the k-th True element of ``mask``."""
    flat = int(torch.nonzero(mask.reshape(-1))[k]) if not bool(mask.all()) else k
    pos = []
    for size in reversed(shape):
        pos.append(flat % size if size else 0)
        flat //= max(size, 1)
    return "[" + ",".join(str(p) for p in reversed(pos)) + "]"


def compare_outputs(outs: Any, refs: Any, meta: OutputMeta, tol: Tolerance) -> Verdict:
    """Compare a kernel's outputs (tensor or tuple) with the high-precision references."""
    outs, refs = as_tuple(outs), as_tuple(refs)
    problem = check_meta(outs, meta)
    if problem:
        return Verdict(False, math.inf, problem)
    worst = 0.0
    nonfinite = 0
    for i, (out, ref) in enumerate(zip(outs, refs)):
        v = compare_tensor(out, ref, tol)
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
