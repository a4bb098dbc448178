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


COMPILE_FOR_SM90 = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from autokernel.harness import compare_kernel
ints = ("rows", "width", "blocks_per_program", "o_row_stride", "o_col_stride", "r_row_stride", "r_col_stride")
signature = {"out_ptr": "*bf16", "ref_ptr": "*fp32", "part_ptr": "*fp64", **{k: "i32" for k in ints},
             "atol": "fp32", "rtol": "fp32", "BLOCK_R": "constexpr", "BLOCK_C": "constexpr", "FIELDS": "constexpr"}
source = ASTSource(compare_kernel._compare_kernel, signature,
                   constexprs={"BLOCK_R": 4, "BLOCK_C": 1024, "FIELDS": compare_kernel.FIELDS})
try:
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=compare_kernel.LAUNCH_OPTIONS)
except Exception as exc:  # a Triton build without the CUDA backend's compiler
    print(json.dumps({"skip": repr(exc)[:300]}))
    sys.exit(0)
print(json.dumps({"ptx": kernel.asm["ptx"]}))
"""


def test_compiled_for_a_gpu_it_divides_and_rounds_as_pytorch_does():
    """Compiled for sm_90 (no GPU needed; in a process of its own, the interpreter off) with the
    options the judge launches it with: IEEE division (Triton's ``/`` on float32 is an
    approximate ``div.full``) and no fused multiply-add (Triton contracts ``rtol * |ref| + atol``
    into one by default), so the element ratios are bit for bit PyTorch's."""
    import json
    import subprocess
    import sys

    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_SM90], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"cannot compile for sm_90 here: {result['skip']}")
    ptx = result["ptx"]
    assert re.search(r"\bdiv\.rn\.f32\b", ptx) and not re.search(r"\bdiv\.(full|approx)\.f32\b", ptx)
    assert not re.search(r"\bfma\.rn(\.ftz)?\.f32\b", ptx)


def test_a_kernel_that_cannot_run_leaves_the_comparison_to_pytorch(monkeypatch, capsys):
    from autokernel.harness import compare_kernel

    def broken(*args, **kwargs):
        raise RuntimeError("no such option: enable_fp_fusion")

    monkeypatch.setattr(compare_kernel, "findings", broken)
    monkeypatch.setattr(compare_kernel, "_failed", [])
    x = torch.ones(2, 3)
    assert compare_kernel.findings_or_none(x, x, TOL, True) is None
    assert "fused comparison kernel failed (RuntimeError: no such option" in capsys.readouterr().err
    assert not compare_kernel.applies(x, x, TOL)  # not tried again


def test_compare_outputs_takes_the_fused_pass_where_it_applies(monkeypatch):
    """The judge's entry point, with the CPU counted as a device of the fused pass: float
    outputs go through the kernel (verdicts as the definition's), integer outputs and a zero
    atol do not."""
    from autokernel.harness import compare_kernel

    calls = []
    real = compare_kernel.findings
    monkeypatch.setattr(compare_kernel, "findings", lambda *a: calls.append(a[0].shape) or real(*a))
    cases = {name: (out, ref, tol) for name, out, ref, tol in tricky_cases(torch.float32)}

    def judged(out, ref, tol, devices):
        monkeypatch.setattr(compare, "FUSED_DEVICE_TYPES", devices)
        return compare.compare_outputs(out, ref, compare.output_meta(out), tol)

    for name in ("elementwise", "mass", "special-mismatch", "zero-d", "one-d", "strided", "wide-bf16"):
        out, ref, tol = cases[name]
        got = judged(out, ref, tol, ("cpu",))
        assert len(calls) == 1, name
        calls.clear()
        assert_agree(got, judged(out, ref, tol, ()), name)
        assert not calls
    out, ref, tol = cases["int-differ"]
    assert judged(out, ref, tol, ("cpu",)) == judged(out, ref, tol, ())
    out, ref, _ = cases["elementwise"]
    judged(out, ref, Tolerance(0.0, 1e-2, 1e-2), ("cpu",))
    assert not calls
