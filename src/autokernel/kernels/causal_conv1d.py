"""Causal depthwise conv1d + bias (+ silu) in one pass.

A program computes a [BLOCK_D, BLOCK_L] tile of the output: for each of the K taps it loads the
input tile shifted back by K - 1 - k steps (zeros before the sequence starts), multiplies by the
tap's weight per channel and accumulates in fp32, then adds the bias and applies silu.  The input
is taken with its strides (the mixer hands over a transposed view, channels contiguous).
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_D": 32, "BLOCK_L": 32, "num_warps": 4, "num_stages": 1}
KNOB_SPACE = {"BLOCK_D": [16, 32, 64, 128], "BLOCK_L": [16, 32, 64, 128], "num_warps": [1, 2, 4, 8],
              "num_stages": [1, 2]}


@triton.jit
def _causal_conv1d_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, D, L, K, sx_b, sx_d, sx_l,
                          SILU: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    l = tl.program_id(2) * BLOCK_L + tl.arange(0, BLOCK_L)
    d_ok = d < D
    d64 = d.to(tl.int64)
    acc = tl.zeros((BLOCK_D, BLOCK_L), dtype=tl.float32)
    x_rows = x_ptr + b * sx_b + d64[:, None] * sx_d
    for k in range(0, K):
        src = l - (K - 1) + k
        mask = d_ok[:, None] & ((src >= 0) & (src < L))[None, :]
        x = tl.load(x_rows + src.to(tl.int64)[None, :] * sx_l, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + d64 * K + k, mask=d_ok, other=0.0).to(tl.float32)
        acc += w[:, None] * x
    acc += tl.load(bias_ptr + d64, mask=d_ok, other=0.0).to(tl.float32)[:, None]
    if SILU:
        acc = acc * tl.sigmoid(acc)
    out_mask = d_ok[:, None] & (l < L)[None, :]
    tl.store(out_ptr + b * D * L + d64[:, None] * L + l[None, :], acc.to(out_ptr.dtype.element_ty), mask=out_mask)


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, silu: int) -> torch.Tensor:
    batch, D, L = x.shape
    K = weight.shape[1]
    out = torch.empty((batch, D, L), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    weight, bias = weight.contiguous(), bias.contiguous()
    block_d = min(KNOBS["BLOCK_D"], triton.next_power_of_2(D))
    block_l = min(KNOBS["BLOCK_L"], triton.next_power_of_2(L))
    grid = (batch, triton.cdiv(D, block_d), triton.cdiv(L, block_l))
    _causal_conv1d_kernel[grid](x, weight, bias, out, D, L, K, *x.stride(), SILU=bool(silu),
                                BLOCK_D=block_d, BLOCK_L=block_l, num_warps=KNOBS["num_warps"],
                                num_stages=KNOBS["num_stages"])
    return out
