"""Large shapes on sampled rows (harness/large_shapes.py) and the raw-memory paths a call may
not open (harness/host_reads.py): the pure parts.  The end-to-end attacks are in
test_attacks_coverage.py (rows past a bound, offsets that wrap) and test_harness_attacks.py."""
from __future__ import annotations

import random

import torch

from autokernel.harness import host_reads, large_shapes
from autokernel.problems.registry import get_problem


def test_large_shapes_pass_the_bounds_with_odd_rows_at_the_narrowest_target():
    reduce = get_problem("reduce")
    shapes = [{"M": 8192, "N": 8192}, {"M": 65536, "N": 1024}]
    drawn = dict(large_shapes.large_shapes(reduce, shapes, random.Random(1), 1 << 17, 1 << 31))
    rows, wide = drawn["large-rows"], drawn["index-width"]
    assert rows["N"] == 1024 and rows["M"] > 1 << 17 and rows["M"] % 2 == 1
    assert wide["N"] == 1024 and wide["M"] * wide["N"] > 1 << 31
    # twice the largest target M when that is past the bound
    assert dict(large_shapes.large_shapes(reduce, shapes, random.Random(1), 100, None))["large-rows"]["M"] > 2 * 65536


def test_no_large_shapes_without_rows_or_bounds():
    rotary = get_problem("rotary")  # dims B, H, S, D
    assert large_shapes.large_shapes(rotary, [{"B": 1, "H": 2, "S": 8, "D": 16}], random.Random(0), 10, 10) == []
    assert large_shapes.large_shapes(get_problem("softmax"), [{"M": 4, "N": 8}], random.Random(0), None, None) == []
    assert large_shapes.bounds("cpu") == (None, None)  # the interpreter cannot afford them
    assert large_shapes.bounds("cuda:0") == (1 << 17, 1 << 31)


def test_sampled_rows_include_the_ends_and_the_powers_of_two():
    rows = large_shapes.sampled_rows(70001, random.Random(3))
    assert rows == sorted(set(rows)) and rows[0] == 0 and rows[-1] == 70000
    assert set(range(70001 - large_shapes.LAST_ROWS, 70001)) <= set(rows)
    assert {16383, 16384, 65535, 65536} <= set(rows)
    assert large_shapes.sampled_rows(3, random.Random(0)) == [0, 1, 2]


def test_rows_of_cuts_only_the_tensors_with_m_rows():
    x, w = torch.arange(12.0).reshape(6, 2), torch.ones(2)
    index = torch.tensor([0, 5])
    cut_x, cut_w, eps = large_shapes.rows_of((x, w, 1e-6), 6, index)
    assert cut_x.tolist() == [[0.0, 1.0], [10.0, 11.0]] and cut_w is w and eps == 1e-6


def test_memory_paths(tmp_path):
    (tmp_path / "innocent").symlink_to("/proc/self/mem")
    assert host_reads.memory_path(tmp_path / "innocent")
    for path in ("/proc/self/mem", "/proc/1234/mem", "/proc/self/map_files/7f-80", "/dev/shm/torch_1_2",
                 "/proc/self/fd/5", b"/proc/self/pagemap", "/proc/self/../self/mem", "/proc/self/task/9/mem"):
        assert host_reads.memory_path(path), path
    # a descriptor number is how subprocess pipes open (Triton's compiler, inside a launch)
    for path in ("/tmp/kernel.py", "/proc/cpuinfo", "/proc/meminfo", "/proc/self/status", "/proc/self/maps",
                 "/dev/null", "mem", 7):
        assert not host_reads.memory_path(path), path


def test_only_problems_with_rows_get_large_shapes():
    matmul = get_problem("matmul")  # a row of C costs a row of A times all of B
    assert large_shapes.large_shapes(matmul, [{"M": 16, "N": 24, "K": 40}], random.Random(0), 10, 10) == []
    gelu = get_problem("gelu")  # tanh is a fixed flag, not a dimension of the row
    shape = dict(gelu.cpu_shapes[0])
    drawn = dict(large_shapes.large_shapes(gelu, [shape], random.Random(0), 10, None))
    assert drawn["large-rows"]["tanh"] == shape["tanh"] and drawn["large-rows"]["M"] > 10


def test_the_index_width_shape_puts_a_row_start_past_the_bound():
    """``M = bound // width + 1`` (one draw in 32) gave 103 rows of 40 for a bound of 4096: 4120
    elements, but the last row began at 4080, so a kernel whose row offsets wrap at the bound
    computed every row right (test_attacks_coverage.py's reduce_offsets_wrap passed, once in CI).
    At every draw some row must begin at or past the bound."""
    reduce = get_problem("reduce")
    for width, bound in ((40, 4096), (1024, 1 << 31), (50257, 1 << 31), (64, 4096)):
        for seed in range(64):
            wide = dict(large_shapes.large_shapes(reduce, [{"M": 9, "N": width}], random.Random(seed), None,
                                                  bound))["index-width"]
            assert (wide["M"] - 1) * width >= bound, (width, bound, wide)


def test_moe_experts_rows_are_tokens_and_the_hidden_rows_pass_the_bound():
    """moe_experts says what its rows are (``Problem.rows``): tokens, each adding K hidden rows of
    I elements (gate/up's output, the widest buffer); its free dimensions are T, D and I, so the
    M-row rule alone gave it no large shapes."""
    moe = get_problem("moe_experts")
    mixtral = {"T": 4096, "K": 2, "E": 8, "D": 4096, "I": 14336}
    qwen = {"T": 4096, "K": 4, "E": 60, "D": 2048, "I": 1408}
    for seed in range(16):
        drawn = dict(large_shapes.large_shapes(moe, [mixtral, qwen], random.Random(seed), 1 << 17, 1 << 31))
        wide, rows = drawn["index-width"], drawn["large-rows"]
        assert dict(wide, T=0) == dict(qwen, T=0) and dict(rows, T=0) == dict(qwen, T=0)  # the narrowest rows
        assert (wide["T"] - 1) * wide["K"] * wide["I"] >= 1 << 31
        assert rows["T"] > 1 << 17 and rows["T"] % 2 == 1
