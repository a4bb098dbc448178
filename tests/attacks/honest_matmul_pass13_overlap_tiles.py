"""HONEST: matmul whose edge tiles are shifted back inside the matrix (start = min(pid*BM, M-BM))
instead of masked, so the last tile of each dimension recomputes (and re-stores) rows/columns that
a neighbouring program also stores: the same value from the same K order (a common trick to keep
edge tiles unmasked).  Masks only for M, N < BM, BN."""
import torch
import triton
import triton.language as tl

KNOBS = {"BM": 32, "BN": 32, "BK": 32}
KNOB_SPACE = {"BM": [32], "BN": [32], "BK": [32]}


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    m0 = tl.maximum(tl.minimum(pm * BM, M - BM), 0)
    n0 = tl.maximum(tl.minimum(pn * BN, N - BN), 0)
    rm = m0 + tl.arange(0, BM)
    rn = n0 + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
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
    BM, BN, BK = KNOBS["BM"], KNOBS["BN"], KNOBS["BK"]
    _mm[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                  b.stride(1), c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK)
    return c
