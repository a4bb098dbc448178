"""HONEST (nondeterministic): split-K matmul, each K slice tl.atomic_add-s its fp32 partial tile into a
zeroed fp32 buffer (one launch), then a second launch casts it to the output dtype."""
import torch
import triton
import triton.language as tl

SPLIT_K = 2


@triton.jit
def _partial(a_ptr, b_ptr, w_ptr, M, N, K, k_per_split, sam, sak, sbk, sbn,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn, ps = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    k_start = ps * k_per_split
    for k0 in range(k_start, k_start + k_per_split, BK):
        rk = k0 + tl.arange(0, BK)
        k_ok = (rk < K) & (rk < k_start + k_per_split)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=k_ok[:, None] & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.atomic_add(w_ptr + rm[:, None] * N + rn[None, :], acc, mask=mask, sem="relaxed")


@triton.jit
def _sum_slices(w_ptr, out_ptr, MN, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for s in range(SPLITS):
        acc += tl.load(w_ptr + s * MN + offs, mask=offs < MN, other=0.0)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=offs < MN)


def kernel_fn(a, b):
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M == 0 or N == 0:
        return out
    work = torch.zeros((1, M, N), dtype=torch.float32, device=a.device)
    k_per_split = max(16, triton.cdiv(triton.cdiv(max(K, 1), SPLIT_K), 16) * 16)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16), SPLIT_K)
    _partial[grid](a, b, work, M, N, K, k_per_split, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                   BM=16, BN=16, BK=16)
    _sum_slices[(triton.cdiv(M * N, 256),)](work, out, M * N, SPLITS=1, BLOCK=256)
    return out
