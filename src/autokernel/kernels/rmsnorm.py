"""RMSNorm, Hugging Face LLaMA semantics: y = w * (x * rsqrt(mean(x^2) + eps)).to(x.dtype).

All arithmetic is fp32; the normalised row is rounded to the output dtype before the weight
multiply, exactly as the HF module does.

variant "single_pass": a program holds ROWS_PER_PROGRAM whole rows in registers (padded to
    a power of two): x read once, y written once.  Rows wider than MAX_BLOCK_N use "looped".
variant "looped": one row per program in BLOCK_N chunks: pass 1 sums squares, pass 2
    re-reads the row (from L2: few rows are in flight) and writes y.
PROGRAMS_PER_SM = 0: one program per row block; > 0: that many per SM, striding (persistent).
num_warps = 0: one warp per 512 elements of the tile (2..16).
"""
import torch
import triton
import triton.language as tl

KNOBS = {"variant": "single_pass", "MAX_BLOCK_N": 8192, "BLOCK_N": 2048, "ROWS_PER_PROGRAM": 1,
         "num_warps": 8, "num_stages": 3, "PROGRAMS_PER_SM": 0}
KNOB_SPACE = {"variant": ["single_pass", "looped"], "MAX_BLOCK_N": [4096, 8192, 16384, 32768],
              "BLOCK_N": [1024, 2048, 4096, 8192], "ROWS_PER_PROGRAM": [1, 2, 4, 8, 16],
              "num_warps": [0, 2, 4, 8, 16, 32], "num_stages": [1, 2, 3], "PROGRAMS_PER_SM": [0, 1, 2, 4, 8]}

MAX_TILE = 16384  # elements per program in the single-pass tile (register budget)


@triton.jit
def _rmsnorm_rows_kernel(x_ptr, w_ptr, y_ptr, M, N, stride_x, stride_y, eps, n_row_blocks,
                         ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    for block in range(pid, n_row_blocks, n_programs):
        rows = block * ROWS + tl.arange(0, ROWS)
        mask = (rows < M)[:, None] & col_mask[None, :]
        rows64 = rows.to(tl.int64)[:, None]
        x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
        h = (x * rstd[:, None]).to(y_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + rows64 * stride_y + cols[None, :], (h * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_looped_kernel(x_ptr, w_ptr, y_ptr, M, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    for row in range(pid, M, n_programs):
        x_row = x_ptr + tl.cast(row, tl.int64) * stride_x
        y_row = y_ptr + tl.cast(row, tl.int64) * stride_y
        sq = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            x = tl.load(x_row + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
            sq += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / N + eps)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            h = (x * rstd).to(y_ptr.dtype.element_ty).to(tl.float32)
            tl.store(y_row + start + cols, (h * w).to(y_ptr.dtype.element_ty), mask=mask)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _grid(n_blocks: int, device: torch.device) -> int:
    per_sm = KNOBS["PROGRAMS_PER_SM"]
    return n_blocks if per_sm <= 0 else max(1, min(n_blocks, _num_sms(device) * per_sm))


def _warps(tile_elems: int) -> int:
    if KNOBS["num_warps"] > 0:
        return KNOBS["num_warps"]
    per_512 = max(1, tile_elems // 512)  # one warp per 512 elements, a power of two (Triton requires it)
    return max(2, min(16, 1 << (per_512.bit_length() - 1)))


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    weight = weight.contiguous()
    y = torch.empty_like(x)
    if M == 0 or N == 0:
        return y
    block = max(16, triton.next_power_of_2(N))
    if KNOBS["variant"] == "single_pass" and block <= max(KNOBS["MAX_BLOCK_N"], 16):
        rows = max(1, min(KNOBS["ROWS_PER_PROGRAM"], MAX_TILE // block, triton.next_power_of_2(M)))
        n_blocks = triton.cdiv(M, rows)
        _rmsnorm_rows_kernel[(_grid(n_blocks, x.device),)](
            x, weight, y, M, N, x.stride(0), y.stride(0), eps, n_blocks, ROWS=rows, BLOCK_N=block,
            num_warps=_warps(rows * block), num_stages=KNOBS["num_stages"])
    else:
        chunk = max(16, min(KNOBS["BLOCK_N"], block))
        _rmsnorm_looped_kernel[(_grid(M, x.device),)](
            x, weight, y, M, N, x.stride(0), y.stride(0), eps, BLOCK_N=chunk,
            num_warps=_warps(chunk), num_stages=KNOBS["num_stages"])
    return y
