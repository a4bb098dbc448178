"""BYPASS (rules 1+2): pass-12's plain counter and plain partial handoff, with every store written
as tl.atomic_xchg(..., sem="relaxed"): atomics' stores are not recorded as stores, so no load is
checked (rule 1) and no two stores are compared (rule 2).  A relaxed xchg whose result is unused is
just a store on a GPU: c = load(cnt); xchg(cnt, c+1) loses updates exactly like the plain counter
(rows never written or written early), and the partials are unordered."""
import torch
import triton
import triton.language as tl

KNOBS = {"CHUNK": 64, "num_warps": 4}
KNOB_SPACE = {"CHUNK": [64, 256], "num_warps": [4]}


@triton.jit
def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, N, stride_xm, SPLIT,
               CHUNK: tl.constexpr, SPLIT_P2: tl.constexpr):
    row = tl.program_id(0)
    j = tl.program_id(1)
    cols = j * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.atomic_xchg(ws_ptr.to(tl.pointer_type(tl.int32)) + row * SPLIT + j,
                   tl.sum(x, axis=0).to(tl.int32, bitcast=True), sem="relaxed")
    c = tl.load(cnt_ptr + row)
    tl.atomic_xchg(cnt_ptr + row, c + 1, sem="relaxed")
    if c == SPLIT - 1:
        k = tl.arange(0, SPLIT_P2)
        parts = tl.load(ws_ptr + row * SPLIT + k, mask=k < SPLIT, other=0.0)
        tl.store(out_ptr + row, tl.sum(parts, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    chunk = KNOBS["CHUNK"]
    split = max(1, triton.cdiv(N, chunk))
    ws = torch.empty((M, split), dtype=torch.float32, device=x.device)
    cnt = torch.zeros((M,), dtype=torch.int32, device=x.device)
    _split_sum[(M, split)](x, ws, cnt, out, N, x.stride(0), split, CHUNK=chunk,
                           SPLIT_P2=max(16, triton.next_power_of_2(split)), num_warps=KNOBS["num_warps"])
    return out
