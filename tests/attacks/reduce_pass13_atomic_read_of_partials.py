"""BYPASS (rule 1): the last program reads the other programs' partials with tl.atomic_add(ws, 0.0)
instead of tl.load: an atomic's own load is not a plain load, so rule 1 never looks at it.  The
counter is bumped BEFORE the partial is computed and stored (no atomic after the store at all).  On
a GPU an atomic read returns whatever is in memory when it lands: the partials of programs that
bumped the counter but are still loading their x chunk are not there yet (garbage)."""
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
    c = tl.atomic_add(cnt_ptr + row, 1, sem="acq_rel")
    cols = j * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0))
    if c == SPLIT - 1:
        k = tl.arange(0, SPLIT_P2)
        parts = tl.atomic_add(ws_ptr + row * SPLIT + k, tl.zeros((SPLIT_P2,), tl.float32), mask=k < SPLIT)
        parts = tl.where(k < SPLIT, parts, 0.0)
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
