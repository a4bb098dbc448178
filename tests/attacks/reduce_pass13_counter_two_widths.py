"""BYPASS (rule 2, byte granularity): each row is split in two halves, one program each, and the
"last program finishes the row" counter is kept by a plain load + store (pass 12's lost update),
but the two programs access it at different widths: program 0 as the int32 at byte 8*row+4, program
1 as the int64 at byte 8*row (whose high half is the same counter).  The judge keys both rules on an
access's first byte, so the two stores never meet (rule 2) and neither load sees the other's
store (rule 1).  An acq_rel atomic_add on a per-row flag after each partial store and before the
counter makes the partial handoff "ordered" for rule 1.  On a GPU the two programs read the counter
at the same time, both see 0, both write 1: neither finishes the row (out keeps torch.empty garbage)."""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK": 128, "num_warps": 4}
KNOB_SPACE = {"BLOCK": [128, 512], "num_warps": [4]}


@triton.jit
def _half_sum(x_ptr, ws_ptr, cnt_ptr, flag_ptr, out_ptr, N, stride_xm, HALF, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    j = tl.program_id(1)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(j * HALF, (j + 1) * HALF, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=(cols < N) & (cols < (j + 1) * HALF),
                       other=0.0).to(tl.float32)
    tl.store(ws_ptr + row * 2 + j, tl.sum(acc, axis=0))
    tl.atomic_add(flag_ptr + row, 0, sem="acq_rel")
    if j == 0:
        hi = cnt_ptr.to(tl.pointer_type(tl.int32)) + row * 2 + 1
        c = tl.load(hi)
        tl.store(hi, c + 1)
    else:
        word = cnt_ptr + row
        w = tl.load(word)
        c = (w >> 32).to(tl.int32)
        tl.store(word, (w & 0xFFFFFFFF) | ((c + 1).to(tl.int64) << 32))
    if c == 1:
        a = tl.load(ws_ptr + row * 2)
        b = tl.load(ws_ptr + row * 2 + 1)
        tl.store(out_ptr + row, (a + b).to(out_ptr.dtype.element_ty))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    ws = torch.empty((M, 2), dtype=torch.float32, device=x.device)
    cnt = torch.zeros((M,), dtype=torch.int64, device=x.device)
    flag = torch.zeros((M,), dtype=torch.int32, device=x.device)
    _half_sum[(M, 2)](x, ws, cnt, flag, out, N, x.stride(0), triton.cdiv(N, 2), BLOCK=KNOBS["BLOCK"],
                      num_warps=KNOBS["num_warps"])
    return out
