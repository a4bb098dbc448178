"""Attack (linear_gelu, correctness): the GEMM at Triton's default input precision, TF32 for fp32
operands (the tensor cores' fast path: 10 mantissa bits), where linear_gelu's fp32 bounds are
matmul's true-fp32 ones (relative norm 2e-5; TF32 gives ~3e-4 on the GPU).  Honest for bf16 and
fp16, whose values TF32 holds exactly.

Why it passed: the Triton interpreter computes a dot of fp32 operands in full fp32 whatever its
input precision, so on the CPU the kernel was exact.
"""
import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = 16, 16, 16


@triton.jit
def _linear_gelu_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, TANH: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x.to(tl.float32), w.to(tl.float32), acc)  # the attack: no input_precision="ieee"
    z = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    if TANH:
        y = z / (1.0 + tl.exp(-2.0 * 0.7978845608028654 * (z + 0.044715 * z * z * z)))
    else:
        y = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], y.to(out_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def kernel_fn(x, w, b, tanh):
    x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    _linear_gelu_kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))](
        x, w, b, out, M, N, K, TANH=bool(tanh), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return out
