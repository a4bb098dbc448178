"""Swin's window attention mask in one pass: out[r, h, i, j] = table[index[i*S + j], h], plus -100
where tokens i and j of window w = r % nW lie in different regions of the shifted grid (shift > 0).

One program writes BLOCK consecutive output elements (int64 offsets split into r, h, i, j): it
gathers the bias through ``index``, and, for a shifted layer, computes both tokens' grid
coordinates from (w, i) and (w, j)
and their regions 3 * R(row) + R(col), R(x, n) = (x >= n - window) + (x >= n - shift), in
integers; the add is done in fp32 and rounded once (what eager's add of two tensors of the
table's dtype gives).  Unshifted, the output is the [1, heads, S, S] bias alone.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK": 1024, "num_warps": 4, "num_stages": 1}
KNOB_SPACE = {"BLOCK": [256, 512, 1024, 2048, 4096], "num_warps": [1, 2, 4, 8], "num_stages": [1, 2]}


@triton.jit
def _region(x, n, window, shift):
    return (x >= n - window).to(tl.int32) + (x >= n - shift).to(tl.int32)


@triton.jit
def _window_bias_kernel(table_ptr, index_ptr, out_ptr, total, heads, height, width, window, shift, nw, n_windows,
                        SHIFTED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    ok = offs < total
    s = window * window
    ss = s * s
    plane = offs // ss  # r * heads + h
    e = offs % ss  # i * S + j
    h = plane % heads
    idx = tl.load(index_ptr + e, mask=ok, other=0)
    v = tl.load(table_ptr + idx * heads + h, mask=ok, other=0.0).to(tl.float32)
    if SHIFTED:
        w = (plane // heads) % n_windows
        row0 = (w // nw) * window
        col0 = (w % nw) * window
        i = e // s
        j = e % s
        ri = 3 * _region(row0 + i // window, height, window, shift) + _region(col0 + i % window, width, window, shift)
        rj = 3 * _region(row0 + j // window, height, window, shift) + _region(col0 + j % window, width, window, shift)
        v = v + tl.where(ri != rj, -100.0, 0.0)
    tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=ok)


def kernel_fn(table: torch.Tensor, index: torch.Tensor, batch: int, height: int, width: int, window: int,
              shift: int) -> torch.Tensor:
    table, index = table.contiguous(), index.contiguous()
    heads = table.shape[1]
    s = window * window
    nh, nw = height // window, width // window
    rows = batch * nh * nw if shift else 1
    out = torch.empty((rows, heads, s, s), dtype=table.dtype, device=table.device)
    if out.numel() == 0:
        return out
    total = out.numel()
    block = KNOBS["BLOCK"]
    _window_bias_kernel[(triton.cdiv(total, block),)](table, index, out, total, heads, height, width, window, shift,
                                                      nw, nh * nw,
                                         SHIFTED=bool(shift), BLOCK=block, num_warps=KNOBS["num_warps"],
                                         num_stages=KNOBS["num_stages"])
    return out
