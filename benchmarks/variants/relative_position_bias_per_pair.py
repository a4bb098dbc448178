"""The `relative_position_bias` starter before 2026-12-07 (benchmarks/relative_position_bias_variants_gpu.py),
which computes a bucket for every (query, key) pair: out[0, h, q, k] = table[bucket(k - (q + offset)), h].

A 2-D grid: one program per (ROWS query rows, BLOCK_K keys).  For each of its rows it computes
the BLOCK_K buckets once, then gathers them from the table for BLOCK_H heads at a time and
stores each head's run of keys contiguously (the output is [1, H, Sq, Sk]).  The table is NB x H,
a few KiB: it stays in cache, and the output's single write is the whole cost.

The bucket is the problem's to the bit: T5's ``_relative_position_bucket`` as PyTorch computes it
on the CPU, on every device.  A distance below ``max_exact`` is its own bucket; a larger one
truncates ``log(n / max_exact) / log(max_distance / max_exact) * (side - max_exact)`` in float32,
and where the result is an integer (n = 16, 32, 64 for T5's 32 buckets, 128 apart) one bit off in
any step picks the row below.  So every step is rounded once, to nearest: true divisions
(``tl.math.div_rn``: Triton's ``/`` on a GPU is an approximation), and the log taken in float64
and rounded to float32, the correctly rounded float32 log, which is what PyTorch's CPU log gives
at every distance that can sit on a boundary (Triton's float32 log is NumPy's under the
interpreter and a libdevice ``logf`` on a GPU; each is one bit off somewhere).

Distances below ``max_exact`` never reach the log (it sees ``max_exact`` there), so no -inf is
converted to an integer.  Offsets into the output are int64 (H * Sq * Sk can pass 2**31).
"""
import math

import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_K": 256, "BLOCK_H": 16, "ROWS": 2, "num_warps": 4}
KNOB_SPACE = {"BLOCK_K": [64, 128, 256, 512, 1024], "BLOCK_H": [1, 2, 4, 8, 16, 32], "ROWS": [1, 2, 4, 8],
              "num_warps": [1, 2, 4, 8]}


@triton.jit
def _log(x):
    """The correctly rounded float32 log."""
    return tl.log(x.to(tl.float64)).to(tl.float32)


@triton.jit
def _buckets(rel, max_exact, side, log_ratio, log_buckets, BIDIRECTIONAL: tl.constexpr):
    """T5's bucket of each relative position ``rel`` (int32)."""
    if BIDIRECTIONAL:
        upper = tl.where(rel > 0, side, 0)
        n = tl.abs(rel)
    else:
        upper = tl.zeros_like(rel)
        n = tl.maximum(-rel, 0)
    ratio = tl.math.div_rn(tl.maximum(n, max_exact).to(tl.float32), max_exact.to(tl.float32))
    steps = tl.math.div_rn(_log(ratio), log_ratio) * log_buckets
    far = tl.minimum(max_exact + steps.to(tl.int32), side - 1)
    return upper + tl.where(n < max_exact, n, far)


# a size or offset of 1 (a decoding step's one query) must not become a constant of the compiled kernel
@triton.jit(do_not_specialize=["Sq", "Sk", "offset", "H", "stride_tb", "stride_th", "max_exact", "side"])
def _relative_position_bias_kernel(table_ptr, out_ptr, Sq, Sk, offset, H, stride_tb, stride_th,
                                   max_exact, side, log_ratio, log_buckets,
                                   BIDIRECTIONAL: tl.constexpr,
                                   ROWS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr):
    keys = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    key_ok = keys < Sk
    plane = Sq.to(tl.int64) * Sk  # one head's [Sq, Sk]
    for r in range(ROWS):
        q = tl.program_id(0) * ROWS + r
        if q < Sq:
            rows = _buckets(keys - (q + offset), max_exact, side, log_ratio, log_buckets, BIDIRECTIONAL)
            for h0 in range(0, H, BLOCK_H):
                heads = h0 + tl.arange(0, BLOCK_H)
                mask = (heads < H)[:, None] & key_ok[None, :]
                vals = tl.load(table_ptr + rows[None, :] * stride_tb + heads[:, None] * stride_th, mask=mask)
                dst = heads.to(tl.int64)[:, None] * plane + q.to(tl.int64) * Sk + keys[None, :]
                tl.store(out_ptr + dst, vals, mask=mask)


def kernel_fn(table: torch.Tensor, query_length: int, key_length: int, offset: int, bidirectional: bool,
              max_distance: int) -> torch.Tensor:
    num_buckets, heads = table.shape
    side = num_buckets // 2 if bidirectional else num_buckets
    max_exact = side // 2
    out = torch.empty((1, heads, query_length, key_length), dtype=table.dtype, device=table.device)
    if out.numel() == 0:
        return out
    block_k = max(16, min(KNOBS["BLOCK_K"], triton.next_power_of_2(key_length)))
    block_h = max(1, min(KNOBS["BLOCK_H"], triton.next_power_of_2(heads)))
    rows = max(1, KNOBS["ROWS"])
    grid = (triton.cdiv(query_length, rows), triton.cdiv(key_length, block_k))
    _relative_position_bias_kernel[grid](
        table, out, query_length, key_length, offset, heads, table.stride(0), table.stride(1),
        max_exact, side, math.log(max_distance / max_exact), float(side - max_exact),
        BIDIRECTIONAL=bool(bidirectional),
        ROWS=rows, BLOCK_K=block_k, BLOCK_H=block_h, num_warps=KNOBS["num_warps"])
    return out
