"""Starter kernel for `matmul`: c[M,N] = a[M,K] @ b[K,N], fp32 accumulation.

One program computes a BLOCK_M x BLOCK_N tile of c, walking K in BLOCK_K steps.  Programs are
ordered in groups of GROUP_M tile-rows so that tiles running at the same time share rows of a
and columns of b in L2 (the "grouped" or swizzled order).

Numerics: bf16/fp16 tiles go to tl.dot as they are (tensor cores, fp32 accumulator).  fp32
inputs use ``input_precision="ieee"``: the problem's fp32 means true fp32 (the reference runs
with TF32 off), so a TF32 dot would not meet the fp32 tolerance.  Under the Triton interpreter
(CPU tensors) tiles are upcast to fp32 first, because the interpreter's bf16 dot is wrong.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
KNOB_SPACE = {"BLOCK_M": [32, 64, 128, 256], "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [32, 64, 128],
              "GROUP_M": [1, 4, 8, 16], "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]}

# Shared memory one program may use; configurations above it get fewer stages, then smaller K tiles.
SMEM_BYTES = 200 * 1024


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr,
                   UPCAST: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # grouped ordering: GROUP_M tile-rows are swept column by column
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Out-of-range rows/columns read a valid row/column instead (wrapped); their results are
    # never stored, and the loads need no mask.
    rm_load = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    rn_load = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm_load[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn_load[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _block(knob: int, size: int) -> int:
    """The knob, shrunk to the problem size (tl.dot needs at least 16)."""
    return max(16, min(knob, triton.next_power_of_2(max(size, 1))))


def launch_config(M: int, N: int, K: int, itemsize: int, knobs: dict) -> dict:
    """Blocks clamped to the shape and a pipeline that fits in shared memory."""
    bm, bn, bk = _block(knobs["BLOCK_M"], M), _block(knobs["BLOCK_N"], N), _block(knobs["BLOCK_K"], K)
    stages = knobs["num_stages"]
    while stages > 1 and stages * (bm * bk + bk * bn) * itemsize > SMEM_BYTES:
        stages -= 1
    while bk > 16 and stages * (bm * bk + bk * bn) * itemsize > SMEM_BYTES:
        bk //= 2
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": knobs["GROUP_M"],
            "num_warps": knobs["num_warps"], "num_stages": stages}


def matmul(a: torch.Tensor, b: torch.Tensor, knobs: dict | None = None) -> torch.Tensor:
    """a[M,K] @ b[K,N] into a new [M,N] tensor of a's dtype."""
    assert a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0], "expected a[M,K] and b[K,N]"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return c
    cfg = launch_config(M, N, K, a.element_size(), knobs or KNOBS)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    _matmul_kernel[grid](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
        EVEN_K=K % cfg["BLOCK_K"] == 0, IEEE=a.dtype == torch.float32, UPCAST=a.device.type == "cpu",
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return c


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return matmul(a, b)
