"""Compute-bound problems (matmul, attention, fused_mlp) and their starters, on the CPU
interpreter: the starters match the ground truth at every CPU and edge shape, dtype and
structural knob setting; the tolerances accept the eager op and reject what they must."""
from __future__ import annotations

import importlib
import random

import pytest
import torch

from autokernel.problems import get_problem

KINDS = ("matmul", "attention", "fused_mlp")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def truth(problem, args):
    return problem.reference(*[a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in args])


def within(problem, dtype, out, ref) -> tuple[bool, str]:
    tol = problem.tolerance(dtype)
    out, ref = out.double(), ref.double()
    if out.shape != ref.shape or not torch.isfinite(out).all():
        return False, f"shape {tuple(out.shape)} vs {tuple(ref.shape)} or non-finite"
    excess = ((out - ref).abs() - (tol.atol + tol.rtol * ref.abs())).max().item()
    rel = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    return excess <= 0 and rel <= tol.max_rel_norm, f"excess={excess:.3g} rel_norm={rel:.3g}"


def starter(kind):
    return importlib.import_module(f"autokernel.kernels.{kind}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_starter_matches_on_cpu_and_edge_shapes(kind, dtype):
    problem = get_problem(kind)
    kernel = starter(kind)
    for shape in problem.cpu_shapes + problem.cpu_edge_shapes[:2]:
        args = problem.make_inputs(shape, dtype, "cpu", 7)
        out = kernel.kernel_fn(*args)
        assert out.dtype == dtype
        ok, msg = within(problem, dtype, out, truth(problem, args))
        assert ok, f"{kind} {shape} {dtype}: {msg}"


@pytest.mark.parametrize("kind", KINDS)
def test_starter_passes_numerics_cases(kind):
    problem = get_problem(kind)
    kernel = starter(kind)
    shape = problem.cpu_shapes[-1]
    for dtype in (torch.float16, torch.bfloat16):
        cases = problem.adversarial_inputs(shape, dtype, "cpu", 3)
        assert len(cases) >= 3
        for name, args in cases:
            ok, msg = within(problem, dtype, kernel.kernel_fn(*args), truth(problem, args))
            assert ok, f"{kind} {name} {dtype}: {msg}"


# Knob settings that change the kernel's structure: tile shapes against the problem size
# (several K steps, masked K tail, a single tile), L2 grouping on/off, a clamped pipeline.
STRUCTURAL_KNOBS = {
    "matmul": [
        {"variant": "tiled", "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4,
         "num_stages": 2},
        {"variant": "persistent", "BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 16, "num_warps": 8,
         "num_stages": 5},
        {"variant": "tma_persistent", "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 4,
         "num_warps": 8, "num_stages": 5},
    ],
    "attention": [
        {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1},   # several key blocks per row block
        {"BLOCK_M": 32, "BLOCK_N": 128, "num_warps": 4, "num_stages": 4},  # BLOCK_N clamped to BLOCK_M
        {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2},
    ],
    "fused_mlp": [
        {"variant": "interleaved", "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4,
         "num_stages": 2, "DOWN_variant": "persistent", "DOWN_BLOCK_M": 32, "DOWN_BLOCK_N": 32, "DOWN_BLOCK_K": 32,
         "DOWN_num_warps": 4, "DOWN_num_stages": 2},
        {"variant": "dual", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 16, "num_warps": 8,
         "num_stages": 4, "DOWN_variant": "tiled", "DOWN_BLOCK_M": 256, "DOWN_BLOCK_N": 256, "DOWN_BLOCK_K": 128,
         "DOWN_num_warps": 8, "DOWN_num_stages": 5},
    ],
}


def _call(kind, kernel, args, knobs):
    fn = {"matmul": "matmul", "attention": "attention", "fused_mlp": "fused_mlp"}[kind]
    if kind == "attention":
        return kernel.attention(*args, knobs=knobs)
    return getattr(kernel, fn)(*args, knobs=knobs)


@pytest.mark.parametrize("kind", KINDS)
def test_structural_knobs_are_correct(kind):
    problem = get_problem(kind)
    kernel = starter(kind)
    for knobs in STRUCTURAL_KNOBS[kind]:
        assert set(knobs) == set(kernel.KNOBS)
        assert all(v in kernel.KNOB_SPACE[k] for k, v in knobs.items()), "test knobs must come from KNOB_SPACE"
        for shape in (problem.cpu_shapes[-1], problem.cpu_edge_shapes[1]):
            args = problem.make_inputs(shape, torch.float32, "cpu", 11)
            ok, msg = within(problem, torch.float32, _call(kind, kernel, args, knobs), truth(problem, args))
            assert ok, f"{kind} {knobs} {shape}: {msg}"


def _count_descriptors(monkeypatch, module) -> list:
    """Counts tensor descriptors the module builds (the tma paths build them, the rest do not)."""
    made = []
    real = module.TensorDescriptor.from_tensor

    def counting(tensor, block_shape, *args, **kwargs):
        made.append(tuple(block_shape))
        return real(tensor, block_shape, *args, **kwargs)

    monkeypatch.setattr(module.TensorDescriptor, "from_tensor", staticmethod(counting))
    return made


@pytest.mark.parametrize("variant", starter("matmul").KNOB_SPACE["variant"])
def test_matmul_variants_in_half_precision(variant, monkeypatch):
    """Each variant, several tiles per program, on b row-major and on b K-major (a transposed
    view); the tma variants use descriptors where rows are 16-byte aligned and fall back where not."""
    problem, kernel = get_problem("matmul"), starter("matmul")
    made = _count_descriptors(monkeypatch, kernel)
    knobs = {**kernel.KNOBS, "variant": variant, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}
    for shape, aligned in (({"M": 72, "N": 40, "K": 80}, True), ({"M": 37, "N": 19, "K": 45}, False)):
        a, b = problem.make_inputs(shape, torch.bfloat16, "cpu", 13)
        for b_in in (b, b.t().contiguous().t()):
            made.clear()
            out = kernel.matmul(a, b_in, knobs=knobs)
            ok, msg = within(problem, torch.bfloat16, out, truth(problem, (a, b)))
            assert ok, f"{variant} {shape} K-major={b_in.stride(0) == 1}: {msg}"
            assert bool(made) == (variant.startswith("tma") and aligned), made


def test_matmul_auto_variant_uses_tma_only_above_its_work_threshold(monkeypatch):
    problem, kernel = get_problem("matmul"), starter("matmul")
    made = _count_descriptors(monkeypatch, kernel)
    knobs = {**kernel.KNOBS, "variant": "auto", "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}
    shape = {"M": 72, "N": 40, "K": 80}
    a, b = problem.make_inputs(shape, torch.bfloat16, "cpu", 3)
    for threshold, expect_tma in ((72 * 40 * 80, False), (72 * 40 * 80 - 1, True)):
        monkeypatch.setattr(kernel, "AUTO_TMA_MIN_WORK", threshold)
        made.clear()
        ok, msg = within(problem, torch.bfloat16, kernel.matmul(a, b, knobs=knobs), truth(problem, (a, b)))
        assert ok, msg
        assert bool(made) == expect_tma


@pytest.mark.parametrize("variant", starter("fused_mlp").KNOB_SPACE["variant"])
def test_fused_mlp_variants_in_half_precision(variant, monkeypatch):
    problem, kernel = get_problem("fused_mlp"), starter("fused_mlp")
    made = _count_descriptors(monkeypatch, kernel)
    for down in kernel.KNOB_SPACE["DOWN_variant"]:
        knobs = {**kernel.KNOBS, "variant": variant, "DOWN_variant": down, "BLOCK_M": 32, "BLOCK_N": 32,
                 "BLOCK_K": 32, "DOWN_BLOCK_M": 32, "DOWN_BLOCK_N": 32, "DOWN_BLOCK_K": 32}
        for dtype in (torch.bfloat16, torch.float16):
            args = problem.make_inputs({"M": 40, "D": 48, "H": 72}, dtype, "cpu", 17)
            made.clear()
            ok, msg = within(problem, dtype, kernel.fused_mlp(*args, knobs=knobs), truth(problem, args))
            assert ok, f"{variant}/{down} {dtype}: {msg}"
            assert len(made) == 3 * (variant == "dual_tma") + 3 * (down == "tma_persistent")


def test_fused_mlp_empty_hidden_gives_zeros():
    problem, kernel = get_problem("fused_mlp"), starter("fused_mlp")
    args = problem.make_inputs({"M": 3, "D": 16, "H": 0}, torch.bfloat16, "cpu", 1)
    out = kernel.kernel_fn(*args)
    assert out.shape == (3, 16) and torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("kind", KINDS)
def test_knob_declarations(kind):
    kernel = starter(kind)
    for name, value in kernel.KNOBS.items():
        assert value in kernel.KNOB_SPACE[name]
    assert set(kernel.KNOBS) == set(kernel.KNOB_SPACE)


def test_attention_gqa_and_noncausal_differ_from_wrong_semantics():
    problem = get_problem("attention")
    kernel = starter("attention")
    shape = {"B": 1, "H": 4, "Hkv": 2, "S": 24, "D": 16, "causal": 0}
    q, k, v, causal, _ = problem.make_inputs(shape, torch.float32, "cpu", 5)
    out = kernel.kernel_fn(q, k, v, causal)
    ok, msg = within(problem, torch.float32, out, truth(problem, (q, k, v, causal)))
    assert ok, msg
    # The wrong kv-head mapping (h % Hkv instead of h // group) and the wrong mask are caught.
    wrong_heads = problem.reference(q, k[:, [0, 1, 0, 1]], v[:, [0, 1, 0, 1]], False)
    assert not within(problem, torch.float32, out, wrong_heads)[0]
    assert not within(problem, torch.float32, out, problem.reference(q, k, v, True))[0]
    scaled = kernel.kernel_fn(q, k, v, True, 0.3)
    assert within(problem, torch.float32, scaled, problem.reference(q.double(), k.double(), v.double(), True, 0.3))[0]


def test_eager_in_dtype_passes_tolerance():
    for kind in KINDS:
        problem = get_problem(kind)
        shape = problem.cpu_shapes[-1]
        for dtype in DTYPES:
            cases = [("random", problem.make_inputs(shape, dtype, "cpu", 1))]
            cases += problem.adversarial_inputs(shape, dtype, "cpu", 2)
            for name, args in cases:
                ok, msg = within(problem, dtype, problem.reference(*args), truth(problem, args))
                assert ok, f"eager {kind} {name} {dtype}: {msg}"


def _round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Round fp32 values to `bits` explicit mantissa bits (TF32 keeps 10)."""
    m, e = torch.frexp(x.double())
    scale = 2.0 ** (bits + 1)
    return torch.ldexp(torch.round(m * scale) / scale, e).float()


def test_matmul_fp32_tolerance_rejects_tf32():
    problem = get_problem("matmul")
    shape = problem.cpu_shapes[-1]
    a, b = problem.make_inputs(shape, torch.float32, "cpu", 4)
    tf32_like = _round_mantissa(a, 10) @ _round_mantissa(b, 10)
    assert not within(problem, torch.float32, tf32_like, truth(problem, (a, b)))[0]
    assert within(problem, torch.float32, a @ b, truth(problem, (a, b)))[0]


def test_matmul_overflow_case_catches_fp16_accumulation():
    problem = get_problem("matmul")
    shape = {"M": 8, "N": 8, "K": 32}
    cases = dict(problem.adversarial_inputs(shape, torch.float16, "cpu", 9))
    a, b = cases["fp16-overflow"]
    exact = truth(problem, (a, b))
    assert exact.abs().max() < 65504 and torch.equal(exact, exact.round())  # exact and representable
    running = torch.zeros(8, 8, dtype=torch.float16)
    for kk in range(shape["K"]):  # a kernel that keeps its running sum in fp16
        running = running + (a[:, kk:kk + 1].float() * b[kk:kk + 1, :].float()).half()
    assert not within(problem, torch.float16, running, exact)[0]
    assert within(problem, torch.float16, starter("matmul").kernel_fn(a, b), exact)[0]


def test_attention_heldout_keeps_head_layout_and_mask():
    problem = get_problem("attention")
    rng = random.Random(0)
    for shape in problem.gpu_shapes:
        moved = [problem.heldout_shape(shape, rng) for _ in range(20)]
        for m in moved:
            assert {k: m[k] for k in ("H", "Hkv", "D", "causal")} == {k: shape[k] for k in ("H", "Hkv", "D", "causal")}
            assert m["B"] >= 1 and abs(m["S"] - shape["S"]) <= 0.2 * shape["S"] + 2
        assert any(m["S"] != shape["S"] for m in moved)


def test_flops_and_bytes():
    mm = get_problem("matmul")
    assert mm.flops({"M": 2, "N": 3, "K": 4}) == 48
    assert mm.bytes({"M": 2, "N": 3, "K": 4}, torch.bfloat16) == (8 + 12 + 6) * 2
    att = get_problem("attention")
    full = {"B": 1, "H": 2, "Hkv": 1, "S": 8, "D": 4, "causal": 0}
    assert att.flops(full) == 4 * 2 * 64 * 4 and att.flops({**full, "causal": 1}) == att.flops(full) / 2
    assert att.bytes(full, torch.float32) == (2 * 2 * 8 * 4 + 2 * 1 * 8 * 4) * 4
    mlp = get_problem("fused_mlp")
    assert mlp.flops({"M": 2, "D": 3, "H": 5}) == 6 * 30
    assert mlp.bytes({"M": 2, "D": 3, "H": 5}, torch.float16) == (2 * 6 + 3 * 15) * 2


def test_inputs_are_seeded_and_nonzero():
    for kind in KINDS:
        problem = get_problem(kind)
        shape = problem.cpu_shapes[0]
        first = problem.make_inputs(shape, torch.bfloat16, "cpu", 3)
        again = problem.make_inputs(shape, torch.bfloat16, "cpu", 3)
        other = problem.make_inputs(shape, torch.bfloat16, "cpu", 4)
        tensors = [t for t in first if torch.is_tensor(t)]
        assert all(torch.equal(x, y) for x, y in zip(tensors, [t for t in again if torch.is_tensor(t)]))
        assert not torch.equal(tensors[0], [t for t in other if torch.is_tensor(t)][0])
        assert all(t.abs().sum() > 0 for t in tensors)


def test_attention_eager_baseline_is_sdpa_and_agrees_with_the_reference():
    """The eager baseline is what a model runs (scaled_dot_product_attention, GQA included); it
    must compute the same thing as the fp32 judge, at every CPU and edge shape and with a scale."""
    problem = get_problem("attention")
    assert problem.eager is not None and problem.eager is not problem.reference
    for shape in problem.cpu_shapes + problem.cpu_edge_shapes:
        q, k, v, causal, _ = problem.make_inputs(shape, torch.float32, "cpu", 3)
        for extra in ((), (0.3,)):
            got = problem.eager(q, k, v, causal, *extra)
            want = problem.reference(q, k, v, causal, *extra)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_baseline_times_the_problems_eager_op():
    from dataclasses import replace

    from autokernel.harness import baselines
    from autokernel.harness.timing import Timer

    calls = []

    def eager(*args):
        calls.append("eager")
        return args[0]

    def reference(*args):
        calls.append("reference")
        return args[0]

    problem = replace(get_problem("softmax"), reference=reference, eager=eager)
    shape = problem.cpu_shapes[0]
    sets = [problem.make_inputs(shape, torch.float32, "cpu", 0)]
    result = baselines.baseline(problem, "cpu", "cpu", shape, torch.float32, sets, Timer("cpu"))
    assert result.eager_us is not None and result.eager_us > 0
    assert "eager" in calls and "reference" not in calls
    assert baselines.problem_key(problem) != baselines.problem_key(replace(problem, eager=None))


def test_fused_mlp_bf16_bound_leaves_eager_a_margin_at_its_smallest_edge_shape():
    """At one token, D=16, H=33 (16 outputs, each a sum of 33 rounded products) eager's own bf16
    ops came within 7% of the default relative-norm bound (1e-2) in 300 draws, and a CI draw of
    the starter passed it by 2%: the bound was the dtype's rounding, not the kernel."""
    problem = get_problem("fused_mlp")
    eager = problem.eager or problem.reference
    bound = problem.tolerance(torch.bfloat16).max_rel_norm
    worst = 0.0
    for seed in range(300):
        args = problem.make_inputs({"M": 1, "D": 16, "H": 33}, torch.bfloat16, "cpu", seed)
        x, w_gate, w_up, w_down = (a.double() for a in args)
        truth = (torch.nn.functional.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        worst = max(worst, ((eager(*args).double() - truth).norm() / truth.norm()).item())
    assert worst <= 0.75 * bound, (worst, bound)
