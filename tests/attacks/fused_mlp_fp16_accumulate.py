"""Attack (fused_mlp, correctness): fp16 inputs with both GEMMs accumulated in fp16 (the
partial sums rounded to fp16 after every BLOCK_K slice, as an fp16-accumulating tensor-core
product does: twice the rate of fp32 accumulation on several GPUs).  A running sum that passes
65504 is inf, whatever the final sum.

Why it passed: no case of fused_mlp's had a partial sum near fp16's range (matmul and
linear_gelu have the ``fp16-overflow`` arrangement; fused_mlp's cases drive the gate, not the
sums), and on random draws the fp16 rounding of O(1) partial sums is inside fp16's tolerance.
"""
import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 16


@triton.jit
def _gate_up_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, H, D, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, ACC16: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, D, BLOCK_K):
        k = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * D + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < D), other=0.0)
        w_mask = (k[:, None] < D) & (rn[None, :] < H)
        wg = tl.load(wg_ptr + rn[None, :] * D + k[:, None], mask=w_mask, other=0.0)
        wu = tl.load(wu_ptr + rn[None, :] * D + k[:, None], mask=w_mask, other=0.0)
        g = tl.dot(x.to(tl.float32), wg.to(tl.float32), g, input_precision="ieee")
        u = tl.dot(x.to(tl.float32), wu.to(tl.float32), u, input_precision="ieee")
        if ACC16:  # the attack
            g = g.to(tl.float16).to(tl.float32)
            u = u.to(tl.float16).to(tl.float32)
    h = g / (1.0 + tl.exp(-g)) * u
    tl.store(h_ptr + rm[:, None] * H + rn[None, :], h.to(h_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < H))


@triton.jit
def _down_kernel(h_ptr, wd_ptr, out_ptr, M, D, H, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, ACC16: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        k = k0 + rk
        h = tl.load(h_ptr + rm[:, None] * H + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < H), other=0.0)
        w = tl.load(wd_ptr + rn[None, :] * H + k[:, None], mask=(k[:, None] < H) & (rn[None, :] < D), other=0.0)
        acc = tl.dot(h.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        if ACC16:
            acc = acc.to(tl.float16).to(tl.float32)
    tl.store(out_ptr + rm[:, None] * D + rn[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < D))


def kernel_fn(x, w_gate, w_up, w_down):
    x, w_gate, w_up, w_down = (t.contiguous() for t in (x, w_gate, w_up, w_down))
    M, D = x.shape
    H = w_gate.shape[0]
    h = torch.empty((M, H), device=x.device, dtype=x.dtype)
    acc16 = x.dtype == torch.float16
    out = torch.empty((M, D), device=x.device, dtype=x.dtype)
    _gate_up_kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(H, BLOCK_N))](
        x, w_gate, w_up, h, M, H, D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, ACC16=acc16)
    _down_kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(D, BLOCK_N))](
        h, w_down, out, M, D, H, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, ACC16=acc16)
    return out
