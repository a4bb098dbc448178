"""FINDING: fp16 matmul that, for short K (K <= 64: "one K block, fp16 accumulation is accurate
enough there"), accumulates its dot in fp16 (tl.dot(..., out_dtype=tl.float16),
the 2x-rate fp16-accumulator tensor-core path), summed across K blocks in fp32.

The interpreter computes a dot as np.matmul(a, b, dtype=float16), and numpy's float16 matmul
accumulates in float32 and rounds once: within one tl.dot the interpreter is as exact as an fp32
accumulator, so the problem's 'fp16-overflow' case (running sums pass 65504 halfway through K,
exact result small) passes.  interpreter_as_gpu rounds TF32 operands and bf16 casts but not
fp16 accumulators.  On a GPU, an fp16-accumulator MMA keeps the partial sum in fp16 registers
between MMA k-steps of 16 (mma.m16n8k16 / wgmma k=16): at the CPU shapes (K=32: s=79, products
~6.2e3, 16 same-sign terms ~1e5; K=64: s=56, two k-steps ~1e5) the accumulator overflows to inf.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 64, "num_warps": 4}
KNOB_SPACE = {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [64], "num_warps": [4]}


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ACC16: tl.constexpr,
        IEEE: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + k[None, :] * sak, mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * sbk + rn[None, :] * sbn, mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        if ACC16:
            acc += tl.dot(a, b, out_dtype=tl.float16).to(tl.float32)   # fp16 accumulator inside the block
        elif IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:  # bf16: upcast as the starter does (the interpreter's bf16 dot is wrong); TF32 holds bf16 exactly
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.zero_()
    grid = (triton.cdiv(M, KNOBS["BLOCK_M"]), triton.cdiv(N, KNOBS["BLOCK_N"]))
    _mm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
              BLOCK_M=KNOBS["BLOCK_M"], BLOCK_N=KNOBS["BLOCK_N"], BLOCK_K=KNOBS["BLOCK_K"],
              ACC16=a.dtype == torch.float16 and K <= 64, IEEE=a.dtype == torch.float32, num_warps=KNOBS["num_warps"])
    return c
