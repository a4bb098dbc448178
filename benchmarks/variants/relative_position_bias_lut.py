"""A variant of the `relative_position_bias` starter (benchmarks/relative_position_bias_variants_gpu.py):
the bucket of each distance computed once, by a first launch, into a table of n_far + 1 ints, and
the output a gather through it, where the starter computes a bucket for every (query, key) pair.
The bucket's arithmetic is the starter's own ``_buckets``, imported (its notes say why each step
is rounded once); every distance from n_far = max(max_distance, max_exact) on is the last bucket of a side.
"""
import math

import torch
import triton
import triton.language as tl

from autokernel.kernels.relative_position_bias import _buckets  # the same in both

KNOBS = {"BLOCK_K": 256, "BLOCK_H": 16, "ROWS": 2, "num_warps": 4}


@triton.jit(do_not_specialize=["n_far", "max_exact", "side"])
def _distance_buckets_kernel(lut_ptr, n_far, max_exact, side, log_ratio, log_buckets, BLOCK: tl.constexpr):
    n = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # a one-way bucket of relative position -n is the bucket of distance n
    tl.store(lut_ptr + n, _buckets(-n, max_exact, side, log_ratio, log_buckets, False), mask=n <= n_far)


@triton.jit(do_not_specialize=["Sq", "Sk", "offset", "H", "stride_tb", "stride_th", "n_far", "side"])
def _gather_kernel(table_ptr, lut_ptr, out_ptr, Sq, Sk, offset, H, stride_tb, stride_th, n_far, side,
                   BIDIRECTIONAL: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr):
    keys = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    key_ok = keys < Sk
    plane = Sq.to(tl.int64) * Sk
    for r in range(ROWS):
        q = tl.program_id(0) * ROWS + r
        if q < Sq:
            rel = keys - (q + offset)
            if BIDIRECTIONAL:
                upper = tl.where(rel > 0, side, 0)
                n = tl.abs(rel)
            else:
                upper = tl.zeros_like(rel)
                n = tl.maximum(-rel, 0)
            rows = upper + tl.load(lut_ptr + tl.minimum(n, n_far), mask=key_ok, other=0)
            for h0 in range(0, H, BLOCK_H):
                heads = h0 + tl.arange(0, BLOCK_H)
                mask = (heads < H)[:, None] & key_ok[None, :]
                vals = tl.load(table_ptr + rows[None, :] * stride_tb + heads[:, None] * stride_th, mask=mask)
                dst = heads.to(tl.int64)[:, None] * plane + q.to(tl.int64) * Sk + keys[None, :]
                tl.store(out_ptr + dst, vals, mask=mask)


def kernel_fn(table, query_length, key_length, offset, bidirectional, max_distance):
    num_buckets, heads = table.shape
    side = num_buckets // 2 if bidirectional else num_buckets
    max_exact = side // 2
    out = torch.empty((1, heads, query_length, key_length), dtype=table.dtype, device=table.device)
    if out.numel() == 0:
        return out
    n_far = max(max_distance, max_exact)  # every distance from here on is the last bucket of a side
    lut = torch.empty(n_far + 1, dtype=torch.int32, device=table.device)
    _distance_buckets_kernel[(triton.cdiv(n_far + 1, 1024),)](
        lut, n_far, max_exact, side, math.log(max_distance / max_exact), float(side - max_exact), BLOCK=1024)
    block_k = max(16, min(KNOBS["BLOCK_K"], triton.next_power_of_2(key_length)))
    block_h = max(1, min(KNOBS["BLOCK_H"], triton.next_power_of_2(heads)))
    rows = max(1, KNOBS["ROWS"])
    grid = (triton.cdiv(query_length, rows), triton.cdiv(key_length, block_k))
    _gather_kernel[grid](table, lut, out, query_length, key_length, offset, heads, table.stride(0), table.stride(1),
                         n_far, side, BIDIRECTIONAL=bool(bidirectional), ROWS=rows, BLOCK_K=block_k, BLOCK_H=block_h,
                         num_warps=KNOBS["num_warps"])
    return out
