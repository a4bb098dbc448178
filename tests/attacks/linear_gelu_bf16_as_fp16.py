"""Attack (linear_gelu, correctness): bf16 operands converted to fp16 for the dot.  fp16 holds
every bf16 value of magnitude 6e-5..65504 exactly, with more mantissa, so on the judge's draws
(magnitudes up to a few hundred) the result is the bf16 kernel's; past 65504 an operand becomes
inf, which bf16 models meet (activation outliers of 1e5 and more).

Why it passed: no draw of matmul or linear_gelu put a bf16 operand beyond fp16's range.
"""
import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = 16, 16, 16


@triton.jit
def _linear_gelu_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, TANH: tl.constexpr, AS_FP16: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        if AS_FP16:  # the attack
            acc = tl.dot(x.to(tl.float16), w.to(tl.float16), acc)
        else:
            acc = tl.dot(x, w, acc, input_precision="ieee")
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
        x, w, b, out, M, N, K, TANH=bool(tanh), AS_FP16=x.dtype == torch.bfloat16,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return out
