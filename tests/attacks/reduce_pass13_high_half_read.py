"""BYPASS (rule 1, byte granularity): the judge records a store by its first byte only.  The partial is
stored as an int64 whose high half holds the fp32 bits, and read back as the int32 at byte +4, an
address no store started at, so the load is never checked.  The counter is bumped (acq_rel) BEFORE
the partial is computed and stored, with no atomic after the store: on a GPU the last program to
arrive reads partials that are not written yet."""
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
    bits = tl.sum(x, axis=0).to(tl.int32, bitcast=True).to(tl.int64) << 32
    tl.store(ws_ptr.to(tl.pointer_type(tl.int64)) + row * SPLIT + j, bits)
    if c == SPLIT - 1:
        k = tl.arange(0, SPLIT_P2)
        hi = ws_ptr.to(tl.pointer_type(tl.int32)) + (row * SPLIT + k) * 2 + 1
        parts = tl.load(hi, mask=k < SPLIT, other=0).to(tl.float32, bitcast=True)
        tl.store(out_ptr + row, tl.sum(parts, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    chunk = KNOBS["CHUNK"]
    split = max(1, triton.cdiv(N, chunk))
    ws = torch.empty((M, split), dtype=torch.float64, device=x.device)
    cnt = torch.zeros((M,), dtype=torch.int32, device=x.device)
    _split_sum[(M, split)](x, ws, cnt, out, N, x.stride(0), split, CHUNK=chunk,
                           SPLIT_P2=max(16, triton.next_power_of_2(split)), num_warps=KNOBS["num_warps"])
    return out
