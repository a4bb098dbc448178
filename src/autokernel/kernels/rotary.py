"""Rotary embedding, rotate_half layout: with x1 = x[..., :D/2], x2 = x[..., D/2:],

    out[..., :D/2] = x1 * cos[:, :D/2] - x2 * sin[:, :D/2]
    out[..., D/2:] = x2 * cos[:, D/2:] + x1 * sin[:, D/2:]

fp32 inside.  A program takes BLOCK_S positions and HEADS_PER_PROGRAM (batch, head) pairs:
the four cos/sin tiles are loaded once and reused for every head it handles, so x and out
stream through memory once and cos/sin are read (nearly) once.
Consecutive programs take consecutive position blocks of the same head.

x may be strided in B, H and S (D contiguous): q and k straight out of an attention
projection, ``view(B, S, H, D).transpose(1, 2)``, are read in place, and the output keeps x's
layout, so the attention that follows sees the layout it would have seen without us.
"""
import torch
import triton
import triton.language as tl

# defaults: the best of the whole 375-configuration space on an H200 at the target shapes, after
# re-timing the sweep's shortlist in interleaved rounds (benchmarks/tuner_sweep_gpu.py, BENCHMARKS.md):
# 61.15 us against 61.82 us for the earlier default (16, 1, 4 warps, 1 stage); the top ten lie within 2%
KNOBS = {"BLOCK_S": 8, "HEADS_PER_PROGRAM": 1, "num_warps": 2, "num_stages": 2}
KNOB_SPACE = {"BLOCK_S": [8, 16, 32, 64, 128], "HEADS_PER_PROGRAM": [1, 2, 4, 8, 16],
              "num_warps": [1, 2, 4, 8, 16], "num_stages": [1, 2, 3]}


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, BH, H, S,
                   x_sb, x_sh, x_ss, o_sb, o_sh, o_ss,
                   D: tl.constexpr, HALF_BLOCK: tl.constexpr, BLOCK_S: tl.constexpr, HEADS: tl.constexpr):
    HALF: tl.constexpr = D // 2
    pid_s = tl.program_id(0)
    pid_h = tl.program_id(1)
    pos = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    d = tl.arange(0, HALF_BLOCK)
    mask = (pos < S)[:, None] & (d < HALF)[None, :]
    offs = pos[:, None] * D + d[None, :]
    pos64 = tl.cast(pos, tl.int64)[:, None]
    x_offs = pos64 * x_ss + d[None, :]
    o_offs = pos64 * o_ss + d[None, :]
    cos1 = tl.load(cos_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    cos2 = tl.load(cos_ptr + offs + HALF, mask=mask, other=0.0).to(tl.float32)
    sin1 = tl.load(sin_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sin2 = tl.load(sin_ptr + offs + HALF, mask=mask, other=0.0).to(tl.float32)
    for i in range(HEADS):
        bh = pid_h * HEADS + i
        # (a vector compare: the interpreter mishandles a scalar bool in the mask)
        head_mask = mask & ((bh + tl.zeros((BLOCK_S,), dtype=tl.int32)) < BH)[:, None]
        b = tl.cast(bh // H, tl.int64)
        h = tl.cast(bh % H, tl.int64)
        x_head = x_ptr + b * x_sb + h * x_sh
        o_head = out_ptr + b * o_sb + h * o_sh
        x1 = tl.load(x_head + x_offs, mask=head_mask, other=0.0).to(tl.float32)
        x2 = tl.load(x_head + x_offs + HALF, mask=head_mask, other=0.0).to(tl.float32)
        tl.store(o_head + o_offs, (x1 * cos1 - x2 * sin1).to(out_ptr.dtype.element_ty), mask=head_mask)
        tl.store(o_head + o_offs + HALF, (x2 * cos2 + x1 * sin2).to(out_ptr.dtype.element_ty), mask=head_mask)


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
    _rotary_kernel[grid](x, cos, sin, out, bh, H, S, x.stride(0), x.stride(1), x.stride(2),
                         out.stride(0), out.stride(1), out.stride(2), D=D,
                         HALF_BLOCK=max(1, triton.next_power_of_2(D // 2)), BLOCK_S=block_s, HEADS=heads,
                         num_warps=KNOBS["num_warps"], num_stages=KNOBS["num_stages"])
    return out
