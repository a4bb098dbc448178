"""Row softmax: out = exp(x - max(x)) / sum(exp(x - max(x))) over the last dim, fp32 inside.

variant "single_pass": a program holds ROWS_PER_PROGRAM whole rows in registers (padded to
    a power of two): one read, one write.  Rows wider than MAX_BLOCK_N use "looped".
variant "looped": one row per program, BLOCK_N-wide chunks aligned to 16 bytes; pass 1 keeps
    a running max and a rescaled running sum (online softmax), pass 2 re-reads the row
    (mostly from L2, since few rows are in flight) and writes exp(x - max) / sum.
PROGRAMS_PER_SM = 0 launches one program per row block; > 0 launches that many programs
per SM, each striding over the row blocks (persistent).
num_warps = 0 picks one warp per 512 elements of the tile (2..16).
"""
import torch
import triton
import triton.language as tl

KNOBS = {"variant": "single_pass", "MAX_BLOCK_N": 16384, "BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1,
         "num_warps": 0, "num_stages": 2, "PROGRAMS_PER_SM": 0}
KNOB_SPACE = {"variant": ["single_pass", "looped"], "MAX_BLOCK_N": [4096, 8192, 16384, 32768],
              "BLOCK_N": [1024, 2048, 4096, 8192], "ROWS_PER_PROGRAM": [1, 2, 4, 8, 16],
              "num_warps": [0, 2, 4, 8, 16, 32], "num_stages": [1, 2, 3], "PROGRAMS_PER_SM": [0, 1, 2, 4, 8]}

MAX_TILE = 16384  # elements per program in the single-pass tile (register budget)


@triton.jit
def _softmax_rows_kernel(x_ptr, y_ptr, M, N, stride_x, stride_y, n_row_blocks,
                         ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    for block in range(pid, n_row_blocks, n_programs):
        rows = block * ROWS + tl.arange(0, ROWS)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        rows64 = rows.to(tl.int64)[:, None]
        x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
        row_max = tl.max(x, axis=1)
        # rows past M are all -inf; shift by 0 there so no NaN is formed (they are not stored)
        row_max = tl.where(row_mask, row_max, 0.0)
        e = tl.exp(x - row_max[:, None])
        inv_sum = 1.0 / tl.sum(e, axis=1)
        y = e * inv_sum[:, None]
        tl.store(y_ptr + rows64 * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _online_update(x, run_max, run_sum):
    new_max = tl.maximum(run_max, tl.max(x, axis=0))
    run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
    return new_max, run_sum


@triton.jit
def _softmax_looped_kernel(x_ptr, y_ptr, M, N, stride, BLOCK_N: tl.constexpr, VEC: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_N)
    for row in range(pid, M, n_programs):
        # The chunks start at the 16-byte boundary at or before the row start (VEC elements),
        # so every chunk but the first and the last is in bounds and aligned: unmasked
        # 16-byte vector accesses even when the row length is odd.
        row_start = tl.cast(row, tl.int64) * stride
        lead = row_start % VEC
        base = tl.multiple_of(row_start - lead, VEC)
        x_row = x_ptr + base
        y_row = y_ptr + base
        n_chunks = (N + lead + BLOCK_N - 1) // BLOCK_N
        last = (n_chunks - 1) * BLOCK_N
        first_mask = (offs >= lead) & (offs < N + lead)
        last_mask = (last + offs >= lead) & (last + offs < N + lead)

        x = tl.load(x_row + offs, mask=first_mask, other=-float("inf")).to(tl.float32)
        run_max, run_sum = _online_update(x, -float("inf"), 0.0)
        for k in range(1, n_chunks - 1):
            x = tl.load(x_row + k * BLOCK_N + offs).to(tl.float32)
            run_max, run_sum = _online_update(x, run_max, run_sum)
        if n_chunks > 1:
            x = tl.load(x_row + last + offs, mask=last_mask, other=-float("inf")).to(tl.float32)
            run_max, run_sum = _online_update(x, run_max, run_sum)

        inv_sum = 1.0 / run_sum
        x = tl.load(x_row + offs, mask=first_mask, other=-float("inf")).to(tl.float32)
        tl.store(y_row + offs, (tl.exp(x - run_max) * inv_sum).to(y_ptr.dtype.element_ty), mask=first_mask)
        for k in range(1, n_chunks - 1):
            x = tl.load(x_row + k * BLOCK_N + offs).to(tl.float32)
            tl.store(y_row + k * BLOCK_N + offs, (tl.exp(x - run_max) * inv_sum).to(y_ptr.dtype.element_ty))
        if n_chunks > 1:
            x = tl.load(x_row + last + offs, mask=last_mask, other=-float("inf")).to(tl.float32)
            tl.store(y_row + last + offs, (tl.exp(x - run_max) * inv_sum).to(y_ptr.dtype.element_ty), mask=last_mask)


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
    return max(2, min(16, tile_elems // 512))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    y = torch.empty_like(x)
    if M == 0 or N == 0:
        return y
    block = max(16, triton.next_power_of_2(N))
    if KNOBS["variant"] == "single_pass" and block <= max(KNOBS["MAX_BLOCK_N"], 16):
        rows = max(1, min(KNOBS["ROWS_PER_PROGRAM"], MAX_TILE // block, triton.next_power_of_2(M)))
        n_blocks = triton.cdiv(M, rows)
        _softmax_rows_kernel[(_grid(n_blocks, x.device),)](
            x, y, M, N, x.stride(0), y.stride(0), n_blocks, ROWS=rows, BLOCK_N=block,
            num_warps=_warps(rows * block), num_stages=KNOBS["num_stages"])
    else:
        chunk = max(16, min(KNOBS["BLOCK_N"], block))
        _softmax_looped_kernel[(_grid(M, x.device),)](
            x, y, M, N, x.stride(0), BLOCK_N=chunk, VEC=16 // x.element_size(),
            num_warps=_warps(chunk), num_stages=KNOBS["num_stages"])
    return y
