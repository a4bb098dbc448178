"""Rotary embedding that reads interleaved pairs and writes halves: for pair i (x[2i], x[2i+1]),

    out[i]       = x[2i] * cos[i]   - x[2i+1] * sin[i]
    out[D/2 + i] = x[2i+1] * cos[i] + x[2i] * sin[i]

(i < D/2; the tables' second half is not read).  fp32 inside.  Whole rows are loaded
(contiguous, coalesced) and split into their even and odd elements in registers; the two
rotated halves are stored side by side.  A program takes BLOCK_S positions and
HEADS_PER_PROGRAM (batch, head) pairs: the half tables are loaded once for every head it handles.

x may be strided in B, H and S (D contiguous): q and k as slices of an attention projection
are read in place.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_S": 8, "HEADS_PER_PROGRAM": 1, "num_warps": 2, "num_stages": 2}
KNOB_SPACE = {"BLOCK_S": [4, 8, 16, 32, 64], "HEADS_PER_PROGRAM": [1, 2, 4, 8, 16],
              "num_warps": [1, 2, 4, 8], "num_stages": [1, 2, 3]}


@triton.jit
def _pairs_to_halves_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, BH, H, S,
                            x_sb, x_sh, x_ss, o_sb, o_sh, o_ss,
                            D: tl.constexpr, D_BLOCK: tl.constexpr, BLOCK_S: tl.constexpr,
                            HEADS: tl.constexpr):
    HALF: tl.constexpr = D // 2
    pid_s = tl.program_id(0)
    pid_h = tl.program_id(1)
    pos = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    d = tl.arange(0, D_BLOCK)
    i = tl.arange(0, D_BLOCK // 2)
    rows = (pos < S)[:, None]
    x_mask = rows & (d < D)[None, :]
    half_mask = rows & (i < HALF)[None, :]
    pos64 = tl.cast(pos, tl.int64)[:, None]
    table = pos64 * D + i[None, :]
    cos = tl.load(cos_ptr + table, mask=half_mask, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + table, mask=half_mask, other=0.0).to(tl.float32)
    x_offs = pos64 * x_ss + d[None, :]
    o_offs = pos64 * o_ss + i[None, :]
    for h_i in range(HEADS):
        bh = pid_h * HEADS + h_i
        # (a vector compare: the interpreter mishandles a scalar bool in the mask)
        head_ok = ((bh + tl.zeros((BLOCK_S,), dtype=tl.int32)) < BH)[:, None]
        b = tl.cast(bh // H, tl.int64)
        h = tl.cast(bh % H, tl.int64)
        x = tl.load(x_ptr + b * x_sb + h * x_sh + x_offs, mask=x_mask & head_ok, other=0.0).to(tl.float32)
        even, odd = tl.split(tl.reshape(x, (BLOCK_S, D_BLOCK // 2, 2)))
        first = even * cos - odd * sin
        second = odd * cos + even * sin
        o = out_ptr + b * o_sb + h * o_sh + o_offs
        tl.store(o, first.to(out_ptr.dtype.element_ty), mask=half_mask & head_ok)
        tl.store(o + HALF, second.to(out_ptr.dtype.element_ty), mask=half_mask & head_ok)


def kernel_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    B, H, S, D = x.shape
    assert D % 2 == 0, "the head dim holds pairs"
    if x.stride(-1) != 1:
        x = x.contiguous()
    cos = cos.contiguous()
    sin = sin.contiguous()
    out = torch.empty_like(x)
    bh = B * H
    if bh == 0 or S == 0 or D == 0:
        return out
    if out.stride(-1) != 1:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    block_s = min(KNOBS["BLOCK_S"], max(1, triton.next_power_of_2(S)))
    heads = min(KNOBS["HEADS_PER_PROGRAM"], triton.next_power_of_2(bh))
    grid = (triton.cdiv(S, block_s), triton.cdiv(bh, heads))
    _pairs_to_halves_kernel[grid](x, cos, sin, out, bh, H, S, x.stride(0), x.stride(1), x.stride(2),
                                  out.stride(0), out.stride(1), out.stride(2), D=D,
                                  D_BLOCK=max(2, triton.next_power_of_2(D)), BLOCK_S=block_s, HEADS=heads,
                                  num_warps=KNOBS["num_warps"], num_stages=KNOBS["num_stages"])
    return out
