"""Attack (embedding): scale read as a flag, the value fixed to sqrt(N), the judge's only other draw.

Token embedding lookup: out[m, :] = weight[ids[m], :] * scale (fp32 product, one rounding).

A 2-D grid: one program per (row block, column block); ROWS output rows of BLOCK_N columns
per program (short rows still fill a program).  Offsets into the table are int64: V * N can
pass 2**31 for large vocabularies.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_N": 1024, "ROWS": 4, "num_warps": 4, "num_stages": 1}
KNOB_SPACE = {"BLOCK_N": [128, 256, 512, 1024, 2048, 4096], "ROWS": [1, 2, 4, 8, 16],
              "num_warps": [1, 2, 4, 8, 16], "num_stages": [1, 2, 3]}


@triton.jit
def _embedding_kernel(ids_ptr, w_ptr, out_ptr, M, N, stride_w, scale, SCALED: tl.constexpr, ROWS: tl.constexpr,
                      BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    ids = tl.load(ids_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    mask = row_ok[:, None] & (cols < N)[None, :]
    vals = tl.load(w_ptr + ids[:, None] * stride_w + cols[None, :], mask=mask, other=0.0)
    if SCALED:
        vals = (vals.to(tl.float32) * scale).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], vals, mask=mask)


def kernel_fn(ids: torch.Tensor, weight: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    ids = ids.contiguous()
    weight = weight.contiguous()
    M = ids.numel()
    N = weight.shape[1]
    out = torch.empty((M, N), dtype=weight.dtype, device=weight.device)
    if M == 0 or N == 0:
        return out
    block_n = max(16, min(KNOBS["BLOCK_N"], triton.next_power_of_2(N)))
    rows = max(1, min(KNOBS["ROWS"], triton.next_power_of_2(M)))
    grid = (triton.cdiv(M, rows), triton.cdiv(N, block_n))
    _embedding_kernel[grid](ids, weight, out, M, N, weight.stride(0), float(N) ** 0.5, SCALED=float(scale) != 1.0,
                            ROWS=rows, BLOCK_N=block_n,
                            num_warps=KNOBS["num_warps"], num_stages=KNOBS["num_stages"])
    return out
