"""Rotary embedding, rotate_half layout: with x1 = x[..., :D/2], x2 = x[..., D/2:],

    out[..., :D/2] = x1 * cos[:, :D/2] - x2 * sin[:, :D/2]
    out[..., D/2:] = x2 * cos[:, D/2:] + x1 * sin[:, D/2:]

fp32 inside.  A program takes BLOCK_S positions and HEADS_PER_PROGRAM (batch, head) pairs:
the four cos/sin tiles are loaded once and reused for every head it handles, so x and out
stream through memory once and cos/sin are read (nearly) once.
Consecutive programs take consecutive position blocks of the same head: contiguous memory.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_S": 32, "HEADS_PER_PROGRAM": 1, "num_warps": 4, "num_stages": 1}
KNOB_SPACE = {"BLOCK_S": [8, 16, 32, 64, 128], "HEADS_PER_PROGRAM": [1, 2, 4, 8, 16],
              "num_warps": [1, 2, 4, 8, 16], "num_stages": [1, 2, 3]}


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, BH, S,
                   D: tl.constexpr, HALF_BLOCK: tl.constexpr, BLOCK_S: tl.constexpr, HEADS: tl.constexpr):
    HALF: tl.constexpr = D // 2
    pid_s = tl.program_id(0)
    pid_h = tl.program_id(1)
    pos = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    d = tl.arange(0, HALF_BLOCK)
    mask = (pos < S)[:, None] & (d < HALF)[None, :]
    offs = pos[:, None] * D + d[None, :]
    cos1 = tl.load(cos_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    cos2 = tl.load(cos_ptr + offs + HALF, mask=mask, other=0.0).to(tl.float32)
    sin1 = tl.load(sin_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sin2 = tl.load(sin_ptr + offs + HALF, mask=mask, other=0.0).to(tl.float32)
    for i in range(HEADS):
        bh = pid_h * HEADS + i
        # (a vector compare: the interpreter mishandles a scalar bool in the mask)
        head_mask = mask & ((bh + tl.zeros((BLOCK_S,), dtype=tl.int32)) < BH)[:, None]
        head = tl.cast(bh, tl.int64) * S * D
        x1 = tl.load(x_ptr + head + offs, mask=head_mask, other=0.0).to(tl.float32)
        x2 = tl.load(x_ptr + head + offs + HALF, mask=head_mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + head + offs, (x1 * cos1 - x2 * sin1).to(out_ptr.dtype.element_ty), mask=head_mask)
        tl.store(out_ptr + head + offs + HALF, (x2 * cos2 + x1 * sin2).to(out_ptr.dtype.element_ty), mask=head_mask)


def kernel_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    B, H, S, D = x.shape
    x = x.contiguous()
    cos = cos.contiguous()
    sin = sin.contiguous()
    out = torch.empty_like(x)
    bh = B * H
    if bh == 0 or S == 0 or D == 0:
        return out
    block_s = min(KNOBS["BLOCK_S"], max(1, triton.next_power_of_2(S)))
    heads = min(KNOBS["HEADS_PER_PROGRAM"], triton.next_power_of_2(bh))
    grid = (triton.cdiv(S, block_s), triton.cdiv(bh, heads))
    _rotary_kernel[grid](x, cos, sin, out, bh, S, D=D, HALF_BLOCK=max(1, triton.next_power_of_2(D // 2)),
                         BLOCK_S=block_s, HEADS=heads, num_warps=KNOBS["num_warps"], num_stages=KNOBS["num_stages"])
    return out
