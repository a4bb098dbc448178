"""compare_kernel.py, the one-pass comparison used on a GPU, against the PyTorch path (the
definition) in Triton's interpreter: the same verdict on every input, the same reported element
and row, sums equal to rounding."""
from __future__ import annotations

import math
import os
import re

import pytest
import torch

from autokernel.harness import compare
from autokernel.problems.base import DEFAULT_TOLERANCES, Tolerance
from test_compare_pinned import TOL, kind, tricky_cases

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|-?inf|nan")


def fused(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> compare.Verdict:
    from autokernel.harness import compare_kernel

    assert compare_kernel.applies(out, ref, tol)
    return compare.verdict_of(compare_kernel.findings(compare._rows(out), compare._rows(ref), tol, ref.dim() > 0), tol, ref)


def definition(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> compare.Verdict:
    return compare.verdict_of(compare.torch_findings(out, ref, tol), tol, ref)


def assert_agree(got: compare.Verdict, want: compare.Verdict, label: str) -> None:
    """Everything equal, except the float64 sums against the PyTorch path's float32 ones: the
    norm and row-mass numbers agree to rounding (the element ratio and its values are exact)."""
    assert (got.ok, got.nonfinite, kind(got)) == (want.ok, want.nonfinite, kind(want)), (label, got, want)
    if kind(want) in ("max error", "NaN/inf where the reference is finite", "differ where the reference is NaN/inf"):
        assert got == want, (label, got, want)
        return
    assert math.isclose(got.worst_error, want.worst_error, rel_tol=1e-5, abs_tol=1e-12), (label, got, want)
    assert NUMBER.sub("#", got.message) == NUMBER.sub("#", want.message), (label, got, want)
    for a, b in zip(NUMBER.findall(got.message), NUMBER.findall(want.message)):
        assert math.isclose(float(a), float(b), rel_tol=1e-2), (label, got.message, want.message)


def test_the_fused_pass_agrees_on_the_pinned_cases():
    seen = set()
    for name, out, ref, tol in tricky_cases(torch.float32):
        if compare.is_exact_dtype(ref.dtype) or ref.numel() == 0 or name == "huge-values":
            continue  # huge values: below
        want = definition(out, ref, tol)
        assert_agree(fused(out, ref, tol), want, name)
        seen.add(kind(want))
    assert seen == {"pass", "wrong magnitude", "max error", "relative norm error",
                    "NaN/inf where the reference is finite", "differ where the reference is NaN/inf"}


def test_sums_of_huge_values_neither_overflow_nor_cancel():
    """Outputs near 1e30: float32 squares overflow (the PyTorch path's float32 norms are inf, and
    its norm check NaN, so skipped) and float32 row sums lose the 1e-5 relative error to
    rounding.  The fused pass sums in float64: its numbers are those of a float64 computation."""
    case = {name: (out, ref, tol) for name, out, ref, tol in tricky_cases(torch.float32)}
    out, ref, tol = case["huge-values"]
    from autokernel.harness import compare_kernel

    f = compare_kernel.findings(compare._rows(out), compare._rows(ref), tol, True)
    o64, r64 = out.double(), ref.double()
    assert math.isinf(compare.torch_findings(out, ref, tol).sq_ref)
    assert math.isclose(f.sq_ref, float((r64 ** 2).sum()), rel_tol=1e-12)
    assert math.isclose(f.sq_diff, float(((o64 - r64) ** 2).sum()), rel_tol=1e-12)
    frac = ((o64.abs().sum(-1) - r64.abs().sum(-1)).abs() / (tol.rtol * r64.abs().sum(-1) + tol.atol))
    assert f.mass_row == int(frac.argmax()) and math.isclose(f.mass, float(frac.max()), rel_tol=1e-6)
    assert fused(out, ref, tol).ok


def test_rows_split_into_tiles_and_several_row_blocks_per_program(monkeypatch):
    """Small tiles and few programs: each program walks several row blocks, each row several
    column tiles; the first position of the largest ratio and the heaviest row survive it."""
    from autokernel.harness import compare_kernel

    monkeypatch.setattr(compare_kernel, "TILE", 16)
    monkeypatch.setattr(compare_kernel, "MAX_PROGRAMS", 3)
    assert compare_kernel.blocks(13, 37) == (1, 16, 3, 5)
    g = torch.Generator().manual_seed(11)
    ref = torch.randn(13, 37, generator=g)
    out = ref + 1e-4 * torch.randn(13, 37, generator=g)
    for r, c in ((12, 1), (11, 0), (9, 33), (9, 3)):  # equal ratios (2.0 exactly), equal masses: the first wins
        ref[r, c], out[r, c] = -1.0, 1.0
    tie = Tolerance(1.0, 0.0, 10.0)
    v = fused(out, ref, tie)
    assert_agree(v, definition(out, ref, tie), "element")
    assert "max error 2 at [9,3]" in v.message
    ref[4] = ref[3] = ref[10]
    heavy = ref.clone()
    heavy[10] *= 1.3
    heavy[3] *= 1.3
    heavy[4] *= 1.3
    heavy[1] *= 1.2
    loose = Tolerance(1.0, 0.05, 10.0)  # each element within its bound; rows 3, 4 and 10 equally too heavy
    v = fused(heavy, ref, loose)
    assert_agree(v, definition(heavy, ref, loose), "mass")
    assert v.message.startswith("row 3:")
    narrow = torch.randn(40, 3, generator=g)
    assert compare_kernel.blocks(40, 3) == (4, 4, 3, 4)
    bad = narrow.clone()
    bad[39, 2] = float("nan")
    assert_agree(fused(bad, narrow, TOL), definition(bad, narrow, TOL), "last element")


@pytest.mark.parametrize("seed", range(4))
def test_random_values_with_nan_and_inf_on_either_side(seed):
    g = torch.Generator().manual_seed(seed)
    rows, width = [(3, 700), (64, 5), (1, 4099), (9, 130)][seed]
    ref = torch.randn(rows, width, generator=g) * 10 ** float(torch.randint(-3, 4, (), generator=g))
    scale = float(ref.abs().max())
    for out_dtype in (torch.float32, torch.bfloat16, torch.float16):
        tol = DEFAULT_TOLERANCES[out_dtype]
        out = (ref + scale * 1e-3 * torch.randn(rows, width, generator=g)).to(out_dtype)
        assert_agree(fused(out, ref, tol), definition(out, ref, tol), f"{out_dtype} plain")
        r2, o2 = ref.clone(), out.clone()
        picks = torch.randint(0, rows * width, (6,), generator=g)
        for i, p in enumerate(picks.tolist()):
            r2.view(-1)[p] = [float("nan"), float("inf"), -float("inf")][i % 3]
            o2.view(-1)[p] = r2.view(-1)[p] if i < 3 else 0.0
        assert_agree(fused(o2, r2, tol), definition(o2, r2, tol), f"{out_dtype} special ref")
        o3 = out.clone()
        o3.view(-1)[picks[:2]] = float("nan")
        assert_agree(fused(o3, ref, tol), definition(o3, ref, tol), f"{out_dtype} nan out")


def test_where_it_does_not_apply_the_torch_path_decides():
    from autokernel.harness import compare_kernel

    x = torch.ones(3)
    assert not compare_kernel.applies(x.double(), x.double(), TOL)  # float64 work
    assert not compare_kernel.applies(x, x, Tolerance(0.0, 1e-2, 1e-2))  # a zero atol: 0/0 ratios
    assert not compare_kernel.applies(torch.ones(0), torch.ones(0), TOL)
    assert compare_kernel.applies(x.bfloat16(), x, TOL)
