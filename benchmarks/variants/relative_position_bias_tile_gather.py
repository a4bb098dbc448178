"""A variant of the `relative_position_bias` starter (benchmarks/relative_position_bias_variants_gpu.py):
one launch, and each program computes the bucket of every distance its tile spans once.

A program writes ROWS query rows x BLOCK_K keys.  Row r's key c sits at distance
``base + c + ROWS - 1 - r`` with ``base = k0 - (q0 + ROWS - 1 + offset)``, so the tile spans
BLOCK_K + ROWS - 1 distances where the starter computes ROWS * BLOCK_K buckets.  The buckets of
those distances are computed once (the starter's own ``_buckets``, imported: its notes say why each
step is rounded once), and each row takes its keys' buckets from them by ``tl.gather``.  At
ROWS 16 and BLOCK_K 128 that is 256 logs for 2048 pairs instead of 2048; the variant with a
first launch for the buckets (``relative_position_bias_lut.py``) did as much work but paid a second
launch from the host.
"""
import math

import torch
import triton
import triton.language as tl

from autokernel.kernels.relative_position_bias import _buckets

KNOBS = {"BLOCK_K": 128, "ROWS": 16, "num_warps": 4}


@triton.jit(do_not_specialize=["Sq", "Sk", "offset", "H", "stride_tb", "stride_th", "max_exact", "side"])
def _tile_gather_kernel(table_ptr, out_ptr, Sq, Sk, offset, H, stride_tb, stride_th,
                        max_exact, side, log_ratio, log_buckets,
                        BIDIRECTIONAL: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr,
                        SPAN: tl.constexpr):
    q0 = tl.program_id(0) * ROWS
    k0 = tl.program_id(1) * BLOCK_K
    base = k0 - (q0 + ROWS - 1 + offset)
    spanned = _buckets(base + tl.arange(0, SPAN), max_exact, side, log_ratio, log_buckets, BIDIRECTIONAL)
    rows = tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK_K)[None, :]
    buckets = tl.gather(tl.broadcast_to(spanned[None, :], (ROWS, SPAN)), cols + (ROWS - 1) - rows, axis=1)
    ok = ((q0 + rows) < Sq) & ((k0 + cols) < Sk)
    dst = (q0 + rows).to(tl.int64) * Sk + (k0 + cols)
    plane = Sq.to(tl.int64) * Sk  # one head's [Sq, Sk]
    for h in range(H):
        vals = tl.load(table_ptr + buckets * stride_tb + h * stride_th, mask=ok)
        tl.store(out_ptr + h * plane + dst, vals, mask=ok)


def kernel_fn(table: torch.Tensor, query_length: int, key_length: int, offset: int, bidirectional: bool,
              max_distance: int) -> torch.Tensor:
    num_buckets, heads = table.shape
    side = num_buckets // 2 if bidirectional else num_buckets
    max_exact = side // 2
    out = torch.empty((1, heads, query_length, key_length), dtype=table.dtype, device=table.device)
    if out.numel() == 0:
        return out
    block_k = max(16, min(KNOBS["BLOCK_K"], triton.next_power_of_2(key_length)))
    rows = max(1, min(KNOBS["ROWS"], triton.next_power_of_2(query_length)))
    span = triton.next_power_of_2(block_k + rows - 1)
    grid = (triton.cdiv(query_length, rows), triton.cdiv(key_length, block_k))
    _tile_gather_kernel[grid](
        table, out, query_length, key_length, offset, heads, table.stride(0), table.stride(1),
        max_exact, side, math.log(max_distance / max_exact), float(side - max_exact),
        BIDIRECTIONAL=bool(bidirectional), ROWS=rows, BLOCK_K=block_k, SPAN=span,
        num_warps=KNOBS["num_warps"])
    return out
