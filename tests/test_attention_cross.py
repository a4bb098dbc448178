"""attention_cross: non-causal attention whose query and key lengths differ (an encoder-decoder's
cross-attention), on CPU under the Triton interpreter: the reference against SDPA, the starter at
every shape and case, the floors."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.problems import get_problem  # noqa: E402
from autokernel.problems.registry import load_starter  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

HF = importlib.util.find_spec("transformers") is not None
KIND = "attention_cross"
SMALL_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}


def _cases(problem, shape, dtype, seed):
    yield "draw", problem.make_inputs(dict(shape), dtype, "cpu", seed)
    yield from problem.adversarial_inputs(dict(shape), dtype, "cpu", seed)


def _fp64(args):
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def test_reference_is_sdpa():
    """The reference is SDPA's math, kv heads repeated, the mask bool or added, at every CPU shape
    (fully masked rows aside: SDPA's math backend gives NaN there, the problem zeros, as its fused
    backends give)."""
    problem = get_problem(KIND)
    checked = 0
    for shape in problem.cpu_shapes + problem.cpu_edge_shapes:
        for seed in range(4):
            for name, args in _cases(problem, shape, torch.float32, seed):
                if "masked-rows" in name:
                    continue
                q, k, v, mask, scale = _fp64(args)
                group = q.shape[1] // k.shape[1]
                want = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                                      attn_mask=None if mask is None else mask.double()
                                                      if mask.dtype != torch.bool else mask, scale=scale)
                got = problem.reference(q, k, v, mask, scale)
                # an additive mask is summed through fp32 in the reference (attention_masked.with_mask)
                bound = 1e-4 if mask is not None and mask.dtype != torch.bool else 1e-10
                assert torch.allclose(got, want, atol=bound), (shape, name)
                checked += 1
    assert checked > 100


def test_shapes_cover_the_cases_the_kind_is_for():
    """Query and key lengths differ at every shape; among the CPU shapes: a single query (a
    decoding step), a single key, keys past two of the widest key block and not a multiple of
    any block, grouped kv heads, and each mask form."""
    problem = get_problem(KIND)
    shapes = problem.cpu_shapes + problem.cpu_edge_shapes
    assert all(s["Sq"] != s["Sk"] for s in shapes + problem.gpu_shapes + problem.gpu_edge_shapes)
    assert any(s["Sq"] == 1 for s in shapes) and any(s["Sk"] == 1 for s in shapes)
    assert any(s["Sk"] > 256 and s["Sk"] % 16 for s in shapes)
    assert any(s["Hkv"] < s["H"] for s in shapes)
    forms = {(s["masked"], s["additive"], s["per_query"]) for s in shapes}
    assert {(0, 0, 0), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)} <= forms
    assert all(problem.check_shape(s) is None for s in shapes)
    assert problem.check_shape({**shapes[0], "masked": 0, "additive": 1}) is not None


def test_floors_count_each_tensor_once_and_both_products():
    problem = get_problem(KIND)
    shape = {"B": 2, "H": 8, "Hkv": 2, "Sq": 5, "Sk": 300, "D": 64, "masked": 0, "additive": 0, "per_query": 0}
    assert problem.flops(shape) == 4 * 2 * 8 * 5 * 300 * 64
    assert problem.bytes(shape, torch.bfloat16) == (2 * 2 * 8 * 5 * 64 + 2 * 2 * 2 * 300 * 64) * 2
    bool_keys = dict(shape, masked=1)
    assert problem.bytes(bool_keys, torch.bfloat16) - problem.bytes(shape, torch.bfloat16) == 2 * 300
    additive_rows = dict(shape, masked=1, additive=1, per_query=1)
    assert problem.bytes(additive_rows, torch.float32) - problem.bytes(shape, torch.float32) == 2 * 5 * 300 * 4


def test_starter_matches_at_every_case_with_small_blocks():
    """16-row query tiles and 16-key blocks: several tiles and a partial last key block at every
    shape (the judge runs the knobs as shipped)."""
    problem = get_problem(KIND)
    kernel = load_starter(KIND)
    for shape in problem.cpu_shapes + problem.cpu_edge_shapes:
        for name, args in _cases(problem, shape, torch.float32, 1):
            got = kernel.attention_cross(*args, knobs=SMALL_BLOCKS)
            want = problem.reference(*_fp64(args))
            assert got.shape == args[0].shape and torch.allclose(got.double(), want, atol=2e-5), (shape, name)
