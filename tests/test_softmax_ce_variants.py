"""Wide-row paths of the softmax and cross_entropy starters, on CPU (Triton interpreter).

Every softmax variant and every cross_entropy SPLIT, at odd row lengths, rows longer than one
chunk, rows shorter than one 16-byte vector, against float64 references.
"""
from __future__ import annotations

import importlib
import os

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU"
)

softmax = importlib.import_module("autokernel.kernels.softmax")
cross_entropy = importlib.import_module("autokernel.kernels.cross_entropy")

# (rows, width, dtype): width 1, under a vector, odd, several chunks of 16, exactly a vector multiple
SOFTMAX_CASES = [(3, 1, torch.float32), (4, 5, torch.float16), (5, 101, torch.bfloat16),
                 (3, 37, torch.float32), (2, 64, torch.bfloat16), (3, 300, torch.float16)]


def _close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> bool:
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    return bool(((out.double() - ref).abs() <= tol + tol * ref.abs()).all())


@pytest.mark.parametrize("knobs", [
    {"variant": "row_vec"},
    {"variant": "looped", "BLOCK_N": 16},
    {"variant": "looped", "BLOCK_N": 16, "PROGRAMS_PER_SM": 1},
    {"variant": "single_pass", "MAX_BLOCK_N": 64},  # wide rows fall back to looped
    {"variant": "auto", "MAX_BLOCK_N": 64, "WIDE_VARIANT": "row_vec"},
    {"variant": "auto", "MAX_BLOCK_N": 64, "WIDE_VARIANT": "looped", "BLOCK_N": 16},
])
def test_softmax_variants_odd_and_multi_chunk_rows(knobs, monkeypatch):
    monkeypatch.setattr(softmax, "KNOBS", {**softmax.KNOBS, **knobs})
    gen = torch.Generator().manual_seed(1)
    for m, n, dtype in SOFTMAX_CASES:
        x = (torch.randn(m, n, generator=gen, dtype=torch.float64) * 3).to(dtype)
        out = softmax.kernel_fn(x)
        assert out.dtype == dtype and out.shape == x.shape
        assert _close(out, torch.softmax(x.double(), -1), dtype), (knobs, m, n, dtype)


def test_softmax_row_vec_on_an_unaligned_view():
    # a view starting one element in: the row starts are off the 16-byte grid differently
    base = torch.randn(4 * 41 + 1, dtype=torch.float64).to(torch.bfloat16)
    x = base[1:].view(4, 41)
    old = dict(softmax.KNOBS)
    try:
        softmax.KNOBS.update(variant="row_vec")
        assert _close(softmax.kernel_fn(x), torch.softmax(x.double(), -1), torch.bfloat16)
    finally:
        softmax.KNOBS.clear()
        softmax.KNOBS.update(old)


def test_row_vec_segments_cover_the_row_with_little_padding():
    for n in (1, 7, 8, 9, 37, 300, 4096, 50257, 65536):
        for vec in (4, 8):
            g = softmax.row_vec_segments(n, vec)
            need = (n + vec - 1) // vec
            assert all(s & (s - 1) == 0 for s in g)
            assert sum(g) >= need
            assert sum(g) <= need + max(2, need // 4)
    assert sum(softmax.row_vec_segments(50257, 8)) * 8 < 65536  # not the 65536-wide pow2 tile


def test_softmax_picks_variant_by_width(monkeypatch):
    monkeypatch.setattr(softmax, "KNOBS", {**softmax.KNOBS, "variant": "auto", "MAX_BLOCK_N": 16384,
                                           "WIDE_VARIANT": "row_vec"})
    assert softmax._pick_variant(4096, 8) == "single_pass"
    assert softmax._pick_variant(50257, 8) == "row_vec"
    assert softmax._pick_variant(70001, 8) == "looped"  # too wide for registers


@pytest.mark.parametrize("variant", ["chunk_max", "lane_max"])
@pytest.mark.parametrize("split", [1, 2, 4, 8])
def test_cross_entropy_split_rows(variant, split, monkeypatch):
    monkeypatch.setattr(cross_entropy, "KNOBS", {**cross_entropy.KNOBS, "variant": variant,
                                                 "SPLIT": split, "BLOCK_V": 16})
    gen = torch.Generator().manual_seed(2)
    # V=101 odd: 7 chunks of 16 per row, split unevenly; V=5: fewer chunks than parts
    for m, v, dtype in [(5, 101, torch.float32), (3, 5, torch.bfloat16), (4, 64, torch.float16)]:
        logits = (torch.randn(m, v, generator=gen, dtype=torch.float64) * 2).to(dtype)
        targets = torch.randint(0, v, (m,), generator=gen)
        targets[1] = -100
        out = cross_entropy.kernel_fn(logits, targets)
        ref = F.cross_entropy(logits.double(), targets, ignore_index=-100)
        assert out.shape == () and out.dtype == dtype
        assert abs(float(out) - float(ref)) <= 2e-2 * max(1.0, abs(float(ref))), (variant, split, m, v, dtype)
        assert torch.equal(out, cross_entropy.kernel_fn(logits, targets))  # deterministic
