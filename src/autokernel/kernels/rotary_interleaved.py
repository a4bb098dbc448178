"""Rotary embedding on interleaved pairs: for each pair (x[2i], x[2i+1]),

    out[2i]   = x[2i] * cos[2i]         - x[2i+1] * sin[2i]
    out[2i+1] = x[2i+1] * cos[2i+1]     + x[2i] * sin[2i+1]

fp32 inside.  Whole rows are loaded (contiguous, coalesced) and split into their even and odd
elements in registers; the rotated pairs are joined back the same way.  A program takes BLOCK_S
positions and HEADS_PER_PROGRAM (batch, head) pairs: the cos/sin tiles are loaded once and reused
for every head it handles.

x may be strided in B, H and S (D contiguous): q and k straight out of an attention projection,
``view(B, S, H, D).transpose(1, 2)``, are read in place, and the output keeps x's layout.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_S": 8, "HEADS_PER_PROGRAM": 1, "num_warps": 2, "num_stages": 2}
KNOB_SPACE = {"BLOCK_S": [4, 8, 16, 32, 64], "HEADS_PER_PROGRAM": [1, 2, 4, 8, 16],
              "num_warps": [1, 2, 4, 8], "num_stages": [1, 2, 3]}


@triton.jit
def _rotary_pairs_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, BH, H, S,
                         x_sb, x_sh, x_ss, o_sb, o_sh, o_ss,
                         D: tl.constexpr, D_BLOCK: tl.constexpr, BLOCK_S: tl.constexpr, HEADS: tl.constexpr):
    pid_s = tl.program_id(0)
    pid_h = tl.program_id(1)
    pos = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    d = tl.arange(0, D_BLOCK)
    mask = (pos < S)[:, None] & (d < D)[None, :]
    pos64 = tl.cast(pos, tl.int64)[:, None]
    table = pos64 * D + d[None, :]
    x_offs = pos64 * x_ss + d[None, :]
    o_offs = pos64 * o_ss + d[None, :]
    cos = tl.load(cos_ptr + table, mask=mask, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
    for i in range(HEADS):
        bh = pid_h * HEADS + i
        # (a vector compare: the interpreter mishandles a scalar bool in the mask)
        head_mask = mask & ((bh + tl.zeros((BLOCK_S,), dtype=tl.int32)) < BH)[:, None]
        b = tl.cast(bh // H, tl.int64)
        h = tl.cast(bh % H, tl.int64)
        x = tl.load(x_ptr + b * x_sb + h * x_sh + x_offs, mask=head_mask, other=0.0).to(tl.float32)
        even, odd = tl.split(tl.reshape(x, (BLOCK_S, D_BLOCK // 2, 2)))
        rotated = tl.reshape(tl.join(-odd, even), (BLOCK_S, D_BLOCK))
        out = x * cos + rotated * sin
        tl.store(out_ptr + b * o_sb + h * o_sh + o_offs, out.to(out_ptr.dtype.element_ty), mask=head_mask)


def kernel_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    B, H, S, D = x.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    cos = cos.contiguous()
    sin = sin.contiguous()
    out = torch.empty_like(x)  # x's layout (for a dense x), see the module docstring
    bh = B * H
    if bh == 0 or S == 0 or D == 0:
        return out
    block_s = min(KNOBS["BLOCK_S"], max(1, triton.next_power_of_2(S)))
    heads = min(KNOBS["HEADS_PER_PROGRAM"], triton.next_power_of_2(bh))
    grid = (triton.cdiv(S, block_s), triton.cdiv(bh, heads))
    _rotary_pairs_kernel[grid](x, cos, sin, out, bh, H, S, x.stride(0), x.stride(1), x.stride(2),
                               out.stride(0), out.stride(1), out.stride(2), D=D,
                               D_BLOCK=max(2, triton.next_power_of_2(D)), BLOCK_S=block_s, HEADS=heads,
                               num_warps=KNOBS["num_warps"], num_stages=KNOBS["num_stages"])
    return out
