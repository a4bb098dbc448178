"""Starter kernel for `linear_gelu`: out[M,N] = gelu(x[M,K] @ w[N,K]^T + b[N]), fp32 accumulation,
the bias and the GELU applied to the fp32 accumulator before the one store.

Each output tile (BLOCK_M x BLOCK_N) walks K in BLOCK_K steps; tiles are visited in groups of
GROUP_M tile-rows so that tiles running together share rows of x and of w in L2.  w is read
in its nn.Linear layout (K contiguous): its [BLOCK_N, BLOCK_K] tiles are transposed for
tl.dot.  Variants:

- ``tiled``: one program per tile, pointer loads (masks only for a ragged K tail).
- ``persistent``: as many programs as multiprocessors, each looping over tiles.
- ``tma``: tiles loaded by the bulk tensor copy engine (tensor descriptors; out-of-range parts
  read as zero and are clipped on store), one program per tile; ``tma_persistent``: one per
  multiprocessor, the tile and K loops flattened so the next tile's loads overlap this
  tile's epilogue.  They need 16-byte aligned rows (K % 8 == 0 and N % 8 == 0 in bf16) and a
  contiguous x and w; otherwise, and for fp32, the call takes ``tiled``/``persistent``.
- ``auto``: ``tma`` for large products (M*N*K > AUTO_TMA_MIN_WORK), ``tiled`` below.

GELU (both forms) is computed as x * p(x) with p computed directly, never as 1 + (a value
near -1), which would lose the left tail's relative precision.  fp32 inputs use
``input_precision="ieee"`` (the problem's fp32 is true fp32); under the Triton interpreter
(CPU tensors) tiles are upcast to fp32 first, because the interpreter's bf16 dot is wrong.
"""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

# num_stages 3: 50.6 us against 60.7 with 4 at GPT-2's (and BERT-base's) c_fc, 4096 x 768 -> 3072,
# the best of a 12-setting sweep on the H200 (BENCHMARKS.md, 2026-12-01 sixth session)
KNOBS = {"variant": "auto", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
         "num_stages": 3}
KNOB_SPACE = {"variant": ["auto", "tiled", "persistent", "tma", "tma_persistent"], "BLOCK_M": [32, 64, 128, 256],
              "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [1, 4, 8, 16],
              "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]}

# Shared memory one program may use (H200: 227 KiB per block); configurations above it get
# fewer stages, then smaller K tiles.  Pointer variants keep a margin for layout conversions.
SMEM_BYTES = {"pointer": 200 * 1024, "tma": 224 * 1024}
AUTO_TMA_MIN_WORK = 2 ** 34  # M*N*K above which "auto" takes the tma path (matmul's measured threshold)
CPU_PROGRAMS = 3  # persistent programs under the interpreter: small, so each loops over tiles


@triton.jit
def _gelu(x, TANH: tl.constexpr):
    if TANH:
        # 0.5 * (1 + tanh(z)) = 1 / (1 + exp(-2z)); exp overflows to inf for very negative x: -0
        z = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        return x / (1.0 + tl.exp(-2.0 * z))
    else:
        # Phi(x) from erfc(|x| / sqrt(2)), a rational-exponential fit (fractional error < 1.2e-7)
        a = tl.abs(x) * 0.7071067811865476
        t = 1.0 / (1.0 + 0.5 * a)
        p = 0.17087277
        p = p * t - 0.82215223
        p = p * t + 1.48851587
        p = p * t - 1.13520398
        p = p * t + 0.27886807
        p = p * t - 0.18628806
        p = p * t + 0.09678418
        p = p * t + 0.37409196
        p = p * t + 1.00002368
        p = p * t - 1.26551223
        erfc = t * tl.exp(p - a * a)
        return x * tl.where(x >= 0, 1.0 - 0.5 * erfc, 0.5 * erfc)


@triton.jit
def _epilogue(acc, b_ptr, rn, N, TANH: tl.constexpr):
    """Bias and GELU on the fp32 accumulator of one tile (columns ``rn``)."""
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    return _gelu(acc + bias[None, :], TANH)


@triton.jit
def _tile_ids(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped order: GROUP_M tile-rows are swept column by column."""
    group_size = GROUP_M * num_pid_n
    first_m = (tile // group_size) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % group_size) % rows_in_group, (tile % group_size) // rows_in_group


@triton.jit
def _pointer_tile(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, pid_m, pid_n,
                  stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  EVEN_K: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr, TANH: tl.constexpr):
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Out-of-range rows/columns read a valid row/column instead (wrapped); their results are
    # never stored, and the loads need no mask.
    rm_load = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    rn_load = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rm_load[:, None] * stride_xm + rk[None, :] * stride_xk
    w_ptrs = w_ptr + rk[:, None] * stride_wk + rn_load[None, :] * stride_wn  # a [BLOCK_K, BLOCK_N] view of w^T

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(x_ptrs)
            b = tl.load(w_ptrs)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(x_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(w_ptrs, mask=rk[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    y = _epilogue(acc, b_ptr, rn, N, TANH)
    out_ptrs = out_ptr + rm[:, None] * stride_om + rn[None, :] * stride_on
    tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _linear_gelu_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K,
                        stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr,
                        UPCAST: tl.constexpr, TANH: tl.constexpr):
    pid_m, pid_n = _tile_ids(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    _pointer_tile(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, pid_m, pid_n,
                  stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                  BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, IEEE, UPCAST, TANH)


@triton.jit
def _linear_gelu_persistent_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K,
                                   stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                   GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr,
                                   UPCAST: tl.constexpr, TANH: tl.constexpr, NUM_PROGRAMS):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS):
        pid_m, pid_n = _tile_ids(tile, num_pid_m, num_pid_n, GROUP_M)
        _pointer_tile(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, pid_m, pid_n,
                      stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                      BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, IEEE, UPCAST, TANH)


@triton.jit
def _linear_gelu_tma_kernel(x_desc, w_desc, b_ptr, out_desc, M, N, K,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr, UPCAST: tl.constexpr, TANH: tl.constexpr, NUM_PROGRAMS):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=True):
        pid_m, pid_n = _tile_ids(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = x_desc.load([off_m, ki * BLOCK_K])
            b = w_desc.load([off_n, ki * BLOCK_K]).T
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        y = _epilogue(acc, b_ptr, off_n + tl.arange(0, BLOCK_N), N, TANH)
        out_desc.store([off_m, off_n], y.to(out_desc.dtype))


def _block(knob: int, size: int) -> int:
    """The knob, shrunk to the problem size (tl.dot needs at least 16)."""
    return max(16, min(knob, triton.next_power_of_2(max(size, 1))))


def launch_config(M: int, N: int, K: int, itemsize: int, knobs: dict, tma: bool = False) -> dict:
    """Blocks clamped to the shape and a pipeline that fits in shared memory (the tma
    variants also stage the output tile there)."""
    bm, bn, bk = _block(knobs["BLOCK_M"], M), _block(knobs["BLOCK_N"], N), _block(knobs["BLOCK_K"], K)
    limit = SMEM_BYTES["tma" if tma else "pointer"]

    def smem(stages_, bk_):
        return (stages_ * (bm * bk_ + bk_ * bn) + (bm * bn if tma else 0)) * itemsize

    stages = knobs["num_stages"]
    while stages > 1 and smem(stages, bk) > limit:
        stages -= 1
    while bk > 16 and smem(stages, bk) > limit:
        bk //= 2
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": knobs["GROUP_M"],
            "num_warps": knobs["num_warps"], "num_stages": stages}


def _tma_ready(t: torch.Tensor) -> bool:
    """A 2-D tensor a tensor descriptor can describe: unit last stride, 16-byte aligned rows."""
    size = t.element_size()
    return t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0 and t.data_ptr() % 16 == 0 and t.shape[1] * size >= 16


_SM_COUNT: dict = {}


def num_programs(device: torch.device, tiles: int) -> int:
    """Programs of a persistent launch: one per multiprocessor (a few under the interpreter)."""
    if device.type != "cuda":
        return max(1, min(CPU_PROGRAMS, tiles))
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return max(1, min(_SM_COUNT[index], tiles))


def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, tanh: bool, knobs: dict | None = None) -> torch.Tensor:
    """gelu(x[M,K] @ w[N,K]^T + b[N]) into a new [M,N] tensor of x's dtype."""
    assert x.ndim == 2 and w.ndim == 2 and b.ndim == 1 and x.shape[1] == w.shape[1] and b.shape[0] == w.shape[0], \
        "expected x[M,K], w[N,K] and b[N]"
    kn = knobs or KNOBS
    b = b.contiguous()
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return out
    ieee, upcast, tanh = x.dtype == torch.float32, x.device.type == "cpu", bool(tanh)
    variant = kn["variant"]
    if variant == "auto":
        variant = "tma" if M * N * K > AUTO_TMA_MIN_WORK else "tiled"
    persistent = variant in ("persistent", "tma_persistent")
    tma = (variant.startswith("tma") and not ieee and K > 0
           and _tma_ready(x) and _tma_ready(w) and _tma_ready(out))

    cfg = launch_config(M, N, K, x.element_size(), kn, tma)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    programs = num_programs(x.device, tiles) if persistent else tiles
    common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], UPCAST=upcast, TANH=tanh,
                  num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if tma:
        x_desc = TensorDescriptor.from_tensor(x, [bm, bk])
        w_desc = TensorDescriptor.from_tensor(w, [bn, bk])
        out_desc = TensorDescriptor.from_tensor(out, [bm, bn])
        _linear_gelu_tma_kernel[(programs,)](x_desc, w_desc, b, out_desc, M, N, K, NUM_PROGRAMS=programs, **common)
        return out
    args = (x, w, b, out, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1))
    if persistent:
        _linear_gelu_persistent_kernel[(programs,)](*args, EVEN_K=K % bk == 0, IEEE=ieee, NUM_PROGRAMS=programs,
                                                    **common)
    else:
        _linear_gelu_kernel[(tiles,)](*args, EVEN_K=K % bk == 0, IEEE=ieee, **common)
    return out


def kernel_fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, tanh: bool) -> torch.Tensor:
    return linear_gelu(x, w, b, tanh)
