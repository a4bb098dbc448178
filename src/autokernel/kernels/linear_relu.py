"""Starter kernel for `linear_relu`: out[M,N] = relu(x[M,K] @ w[N,K]^T + b[N]).

One program owns one BLOCK_M x BLOCK_N tile of the output: it runs the K loop into an fp32
accumulator, adds the bias row, clamps at zero and stores once, so the pre-activation never
goes to memory.  Programs take their tiles in bands of GROUP_M tile-rows, so that programs
running side by side read the same rows of x and of w from L2.

Variants (knob ``variant``):

- ``pointers``: pointer loads; w's [BLOCK_N, BLOCK_K] tile is read as a [BLOCK_K, BLOCK_N] view
  of w^T; only a ragged K tail is masked (rows and columns past the edge read the last valid
  one and are never stored).
- ``descriptors``: x, w and out through tensor descriptors (the bulk copy engine on Hopper:
  out-of-range reads are zeros, stores are clipped).  They need a half-precision dtype, unit
  last strides and 16-byte aligned rows; any other call takes ``pointers``.
- ``auto``: ``descriptors`` when M*N*K is over DESCRIPTOR_MIN_WORK, ``pointers`` below.

fp32 inputs multiply with ``input_precision="ieee"`` (the problem's fp32 is true fp32: TF32
fails its judge).  Under the Triton interpreter (CPU tensors) tiles are widened to fp32 before
``tl.dot``, whose half-precision path there is wrong.
"""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

KNOBS = {"variant": "auto", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
         "num_stages": 3}
KNOB_SPACE = {"variant": ["auto", "pointers", "descriptors"], "BLOCK_M": [32, 64, 128, 256],
              "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [1, 4, 8, 16],
              "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]}

DESCRIPTOR_MIN_WORK = 2 ** 34  # M*N*K over which "auto" takes descriptors (the matmul starter's threshold)
SHARED_MEMORY_LIMIT = 200 * 1024  # bytes of staged tiles per program (H100/H200: 227 KiB a block)


@triton.jit
def _band_order(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(tile row, tile column) of program ``pid``: bands of GROUP_M tile-rows, column by column."""
    tile_cols = tl.cdiv(N, BLOCK_N)
    per_band = GROUP_M * tile_cols
    band_top = (pid // per_band) * GROUP_M
    band_height = min(tl.cdiv(M, BLOCK_M) - band_top, GROUP_M)
    within = pid % per_band
    return band_top + within % band_height, within // band_height


@triton.jit
def _bias_relu(acc, b_ptr, cols, N):
    """relu(acc + b[cols]) on the fp32 accumulator."""
    bias = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    return tl.maximum(acc + bias[None, :], 0.0, propagate_nan=tl.PropagateNan.ALL)  # NaN stays NaN, as in torch.relu


@triton.jit
def _linear_relu_pointers(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K,
                          stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, K_DIVIDES: tl.constexpr, IEEE: tl.constexpr,
                          WIDEN: tl.constexpr):
    tile_row, tile_col = _band_order(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rows = tile_row * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_col * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    x_tile = x_ptr + tl.minimum(rows, M - 1)[:, None] * stride_xm + ks[None, :] * stride_xk
    wt_tile = w_ptr + tl.minimum(cols, N - 1)[None, :] * stride_wn + ks[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        if K_DIVIDES:
            a = tl.load(x_tile)
            bt = tl.load(wt_tile)
        else:
            in_k = ks < K - k_start
            a = tl.load(x_tile, mask=in_k[None, :], other=0.0)
            bt = tl.load(wt_tile, mask=in_k[:, None], other=0.0)
        if WIDEN:
            a = a.to(tl.float32)
            bt = bt.to(tl.float32)
        if IEEE:
            acc = tl.dot(a, bt, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, bt, acc)
        x_tile += BLOCK_K * stride_xk
        wt_tile += BLOCK_K * stride_wk

    y = _bias_relu(acc, b_ptr, cols, N)
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, y.to(out_ptr.dtype.element_ty),
             mask=inside)


@triton.jit
def _linear_relu_descriptors(x_desc, w_desc, out_desc, b_ptr, M, N, K,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, WIDEN: tl.constexpr):
    tile_row, tile_col = _band_order(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    row0 = tile_row * BLOCK_M
    col0 = tile_col * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        a = x_desc.load([row0, k_start])
        bt = w_desc.load([col0, k_start]).T
        if WIDEN:
            a = a.to(tl.float32)
            bt = bt.to(tl.float32)
        acc = tl.dot(a, bt, acc)
    y = _bias_relu(acc, b_ptr, col0 + tl.arange(0, BLOCK_N), N)
    out_desc.store([row0, col0], y.to(out_desc.dtype))


def tile_sizes(M: int, N: int, K: int, itemsize: int, knobs: dict, stage_output: bool) -> dict:
    """The knobs' tiles, shrunk to the problem (tl.dot takes 16 at least), and a pipeline whose
    staged tiles (and, for descriptors, the output tile) fit SHARED_MEMORY_LIMIT: fewer stages
    first, then a shorter K tile."""
    def fit(knob: int, size: int) -> int:
        return max(16, min(knob, triton.next_power_of_2(max(size, 1))))

    bm, bn, bk = fit(knobs["BLOCK_M"], M), fit(knobs["BLOCK_N"], N), fit(knobs["BLOCK_K"], K)
    stages = knobs["num_stages"]

    def staged(stages_: int, bk_: int) -> int:
        return (stages_ * (bm + bn) * bk_ + (bm * bn if stage_output else 0)) * itemsize

    while stages > 1 and staged(stages, bk) > SHARED_MEMORY_LIMIT:
        stages -= 1
    while bk > 16 and staged(stages, bk) > SHARED_MEMORY_LIMIT:
        bk //= 2
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": knobs["GROUP_M"],
            "num_warps": knobs["num_warps"], "num_stages": stages}


def _describable(t: torch.Tensor) -> bool:
    """A 2-D tensor a tensor descriptor can address: unit last stride, 16-byte aligned rows."""
    row_bytes = t.stride(0) * t.element_size()
    return (t.stride(1) == 1 and row_bytes % 16 == 0 and t.data_ptr() % 16 == 0
            and t.shape[1] * t.element_size() >= 16)


def linear_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, knobs: dict | None = None) -> torch.Tensor:
    """relu(x[M,K] @ w[N,K]^T + b[N]) into a new [M,N] tensor of x's dtype."""
    assert x.ndim == 2 and w.ndim == 2 and b.ndim == 1 and x.shape[1] == w.shape[1] and b.shape[0] == w.shape[0], \
        "expected x[M,K], w[N,K] and b[N]"
    knobs = knobs or KNOBS
    M, K = x.shape
    N = w.shape[0]
    b = b.contiguous()
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return out
    ieee, widen = x.dtype == torch.float32, x.device.type == "cpu"
    variant = knobs["variant"]
    if variant == "auto":
        variant = "descriptors" if M * N * K > DESCRIPTOR_MIN_WORK else "pointers"
    descriptors = (variant == "descriptors" and not ieee and K > 0
                   and _describable(x) and _describable(w) and _describable(out))
    cfg = tile_sizes(M, N, K, x.element_size(), knobs, stage_output=descriptors)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], WIDEN=widen,
                  num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if descriptors:
        _linear_relu_descriptors[grid](TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
                                       TensorDescriptor.from_tensor(out, [bm, bn]), b, M, N, K, **common)
    else:
        _linear_relu_pointers[grid](x, w, b, out, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                                    out.stride(0), out.stride(1), K_DIVIDES=K % bk == 0, IEEE=ieee, **common)
    return out


def kernel_fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return linear_relu(x, w, b)
