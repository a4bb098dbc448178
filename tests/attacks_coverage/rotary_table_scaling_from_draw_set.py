"""Attack (rotary_table): scaling read as a flag, the value fixed to the judge's draw set {1, 0.75}.

RoPE cos/sin tables: for each position p (int64) and frequency j < D/2,
angle = float(p) * inv_freq[j] (fp32), then cos/sin(angle) * scaling written at columns j and
j + D/2 of both tables, cast to the tables' dtype.

One program per ROWS positions: each computes the D/2 angles once and writes both halves of
both tables (each angle feeds four outputs).
"""
import torch
import triton
import triton.language as tl

KNOBS = {"ROWS": 4, "num_warps": 4, "num_stages": 1}
KNOB_SPACE = {"ROWS": [1, 2, 4, 8, 16, 32], "num_warps": [1, 2, 4, 8], "num_stages": [1, 2]}


@triton.jit
def _rotary_table_kernel(pos_ptr, inv_ptr, cos_ptr, sin_ptr, R, HALF, scaling, ROWS: tl.constexpr,
                         BLOCK_H: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    row_ok = rows < R
    col_ok = cols < HALF
    pos = tl.load(pos_ptr + rows, mask=row_ok, other=0).to(tl.float32)
    inv = tl.load(inv_ptr + cols, mask=col_ok, other=0.0)
    angle = pos[:, None] * inv[None, :]
    c = (tl.cos(angle) * scaling).to(cos_ptr.dtype.element_ty)
    s = (tl.sin(angle) * scaling).to(sin_ptr.dtype.element_ty)
    mask = row_ok[:, None] & col_ok[None, :]
    base = rows.to(tl.int64)[:, None] * (2 * HALF) + cols[None, :]
    tl.store(cos_ptr + base, c, mask=mask)
    tl.store(cos_ptr + base + HALF, c, mask=mask)
    tl.store(sin_ptr + base, s, mask=mask)
    tl.store(sin_ptr + base + HALF, s, mask=mask)


def kernel_fn(position_ids: torch.Tensor, inv_freq: torch.Tensor, scaling: float, like: torch.Tensor):
    position_ids = position_ids.contiguous()
    inv_freq = inv_freq.contiguous()
    half = inv_freq.numel()
    shape = (*position_ids.shape, 2 * half)
    cos = torch.empty(shape, dtype=like.dtype, device=position_ids.device)
    sin = torch.empty(shape, dtype=like.dtype, device=position_ids.device)
    R = position_ids.numel()
    if R == 0 or half == 0:
        return cos, sin
    rows = max(1, min(KNOBS["ROWS"], triton.next_power_of_2(R)))
    _rotary_table_kernel[(triton.cdiv(R, rows),)](position_ids, inv_freq, cos, sin, R, half, (1.0 if float(scaling) == 1.0 else 0.75), ROWS=rows,
                                                  BLOCK_H=max(2, triton.next_power_of_2(half)),
                                                  num_warps=KNOBS["num_warps"], num_stages=KNOBS["num_stages"])
    return cos, sin
