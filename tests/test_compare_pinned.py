"""The comparison's verdicts pinned: the judge's compare_tensor gives, field for field, what the
implementation before the fused rewrite gave (tests/compare_legacy.py) on inputs chosen to hit
every branch: NaN/inf on either side, ties, slices that split rows, 0-d, empty, one row, wide
rows, strided views, integer and boolean outputs."""
from __future__ import annotations

import math

import pytest
import torch

import compare_legacy
from autokernel.harness import compare
from autokernel.problems.base import DEFAULT_TOLERANCES, Tolerance

TOL = Tolerance(atol=1e-3, rtol=1e-2, max_rel_norm=1e-2)
INF, NAN = float("inf"), float("nan")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tricky_cases(ref_dtype: torch.dtype = torch.float64) -> list[tuple[str, torch.Tensor, torch.Tensor, Tolerance]]:
    """(name, out, ref, tol): outputs in the kernel's dtype, references in ``ref_dtype`` (float64
    as on the CPU, float32 as on a GPU)."""
    cases = []

    def add(name, out, ref, tol=TOL):
        cases.append((name, out, ref.to(ref_dtype) if ref.is_floating_point() else ref, tol))

    r = torch.randn(37, 53, generator=_gen(1), dtype=torch.float64)
    noise = torch.randn(37, 53, generator=_gen(2), dtype=torch.float64)
    add("within", (r + 1e-4 * noise).float(), r)
    bad = (r + 1e-4 * noise).float()
    bad[11, 40] += 0.5
    bad[30, 2] -= 0.25
    add("elementwise", bad, r)
    add("bias", (r * 1.015).float(), r, Tolerance(1e-3, 2e-2, 1e-2))
    tie = r.float().clone()
    tie[3, 5] = float(r[3, 5]) + 1.0
    tie[20, 7] = float(r[20, 7]) + 1.0
    tie[20, 9] = float(r[20, 9]) - 1.0
    add("ties", tie, r, Tolerance(1.0, 0.0, 10.0))  # equal ratios: the first position is reported
    p = torch.softmax(torch.randn(5, 300, generator=_gen(3), dtype=torch.float64) * 2, -1)
    zero_row = p.float().clone()
    zero_row[3] = 0
    add("mass", zero_row, p, DEFAULT_TOLERANCES[torch.bfloat16])
    nan_out = r.float().clone()
    nan_out[0, 0] = NAN
    nan_out[36, 52] = INF
    nan_out[18, 1] = -INF
    add("nan-out", nan_out, r)
    nan_late = r.float().clone()
    nan_late[36, 52] = NAN
    nan_late[1, 1] += 5.0
    add("nan-late", nan_late, r)
    special = r.clone()
    special[2, 3], special[4, 5], special[6, 7] = NAN, INF, -INF
    good = special.float().clone()
    add("special-match", good, special)
    wrong = good.clone()
    wrong[4, 5] = -INF
    wrong[6, 7] = 3.0
    add("special-mismatch", wrong, special)
    wrong_nan = good.clone()
    wrong_nan[2, 3] = 0.0
    add("special-nan-lost", wrong_nan, special)
    both = wrong.clone()
    both[0, 0] = NAN
    add("special-and-nonfinite", both, special)
    all_special = torch.full((3, 4), NAN, dtype=torch.float64)
    all_special[1] = INF
    add("all-special", torch.full((3, 4), NAN), all_special)
    add("all-special-wrong", torch.zeros(3, 4), all_special)
    add("zero-d", torch.tensor(1.5), torch.tensor(1.0, dtype=torch.float64))
    add("zero-d-ok", torch.tensor(1.0), torch.tensor(1.0, dtype=torch.float64))
    add("empty", torch.zeros(0, 7), torch.zeros(0, 7, dtype=torch.float64))
    add("empty-rows", torch.zeros(4, 0), torch.zeros(4, 0, dtype=torch.float64))
    add("one-row", (r[:1] * 1.001).float(), r[:1])
    add("one-d", (r[0] + 0.3).float(), r[0])
    wide = torch.randn(2, 5000, generator=_gen(4), dtype=torch.float64)
    add("wide", (wide + 1e-3 * torch.randn(2, 5000, generator=_gen(5), dtype=torch.float64)).float(), wide)
    add("wide-bf16", wide.to(torch.bfloat16), wide, DEFAULT_TOLERANCES[torch.bfloat16])
    add("wide-fp16-bad", (wide * 1.01).half(), wide, DEFAULT_TOLERANCES[torch.float16])
    add("narrow", (r.reshape(-1, 1) * 1.001).float(), r.reshape(-1, 1))
    big = torch.randn(4, 9, generator=_gen(6), dtype=torch.float64) * 1e30
    add("huge-values", (big * (1 + 1e-5)).float(), big)
    add("tiny-ref", torch.full((100,), 5e-4), torch.zeros(100, dtype=torch.float64))
    add("underflow", torch.zeros(100), torch.full((100,), 2e-33, dtype=torch.float64))
    strided = torch.randn(53, 37, generator=_gen(7), dtype=torch.float64).t()
    add("strided", (strided + 0.02).float().t().contiguous().t(), strided)
    add("three-d", (r.reshape(37, 1, 53) * 1.2).float(), r.reshape(37, 1, 53))
    ints = torch.randint(-1000, 1000, (9, 11), generator=_gen(8))
    add("int-equal", ints.clone(), ints)
    off = ints.clone()
    off[4, 6] += 1
    off[8, 10] -= 3
    add("int-differ", off, ints)
    add("int32-vs-int64", ints.to(torch.int32), ints)
    mask = ints > 0
    add("bool-differ", ~mask, mask)
    add("bool-equal", mask.clone(), mask)
    add("int-empty", torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    return cases


def same(a: compare.Verdict, b: compare.Verdict) -> bool:
    nan_both = math.isnan(a.worst_error) and math.isnan(b.worst_error)
    return (a.ok, a.message, a.nonfinite) == (b.ok, b.message, b.nonfinite) and \
        (nan_both or a.worst_error == b.worst_error)


@pytest.mark.parametrize("chunk", [compare.CHUNK_ELEMENTS, 7, 60, 1000])
@pytest.mark.parametrize("ref_dtype", [torch.float64, torch.float32])
def test_torch_path_verdicts_equal_the_pinned_implementation(chunk, ref_dtype):
    for name, out, ref, tol in tricky_cases(ref_dtype):
        want = compare_legacy.compare_tensor(out, ref, tol, chunk)
        got = compare.compare_tensor(out, ref, tol, chunk)
        assert same(got, want), (name, got, want)


KINDS = ("wrong magnitude", "max error", "relative norm error", "NaN/inf where the reference is finite",
         "differ where the reference is NaN/inf", "integer elements differ")


def kind(v: compare.Verdict) -> str:
    if v.ok:
        return "pass"
    return next(k for k in KINDS if k in v.message)


def test_the_cases_reach_every_verdict():
    """The cases are worth pinning only if they cover each kind of verdict."""
    seen = {kind(compare_legacy.compare_tensor(out, ref, tol, 60)) for _, out, ref, tol in tricky_cases()}
    assert seen == {"pass", *KINDS}
