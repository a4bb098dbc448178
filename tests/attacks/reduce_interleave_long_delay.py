"""ATTACK (red-team pass 18, on the interleaving; caught since 2026-12-06 on about a quarter of launches,
tests/test_harness_interleaved.py): "last program to arrive reads every partial", the arrival counted
BEFORE the chunk is loaded and its partial stored (wrong on a GPU: the last arriver may read partials
not stored yet).  Each writer releases a second counter after its store; the one last arriver makes
DELAY relaxed atomics of nothing, then acquires the second counter without checking its value.
With DELAY large, drawn-evenly turns always finish every writer first (2^-DELAY), and under the
priority scheduler the reader itself is demoted (1% a turn) during its delay with 1 - 0.99^DELAY:
all six stages passed.  On some launches the judge now parks one program after one of its first
three turns until all others have ended or sleep: a writer parked after its count is caught."""
import torch
import triton
import triton.language as tl

KNOBS = {"CHUNK": 128, "DELAY": 2000, "num_warps": 4}
KNOB_SPACE = {"CHUNK": [128, 256, 1024], "num_warps": [2, 4, 8]}


@triton.jit
def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, N, stride_xm, SPLIT, M, TOTAL,
               CHUNK: tl.constexpr, SPLIT_P2: tl.constexpr, DELAY: tl.constexpr):
    row = tl.program_id(0)
    j = tl.program_id(1)
    c = tl.atomic_add(cnt_ptr, 1)
    cols = j * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0))
    tl.atomic_add(cnt_ptr + 1, 1, sem="release")
    if c == TOTAL - 1:
        for _ in range(DELAY):
            tl.atomic_add(cnt_ptr + 2, 1, sem="relaxed")
        tl.atomic_add(cnt_ptr + 1, 0, sem="acquire")
        k = tl.arange(0, SPLIT_P2)
        for r in range(M):
            parts = tl.load(ws_ptr + r * SPLIT + k, mask=k < SPLIT, other=0.0)
            tl.store(out_ptr + r, tl.sum(parts, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    if N == 0:
        return out.zero_()
    chunk = KNOBS["CHUNK"]
    split = max(1, triton.cdiv(N, chunk))
    ws = torch.empty((M, split), dtype=torch.float32, device=x.device)
    cnt = torch.zeros((3,), dtype=torch.int32, device=x.device)
    _split_sum[(M, split)](x, ws, cnt, out, N, x.stride(0), split, M, M * split, CHUNK=chunk,
                           SPLIT_P2=max(16, triton.next_power_of_2(split)), DELAY=KNOBS["DELAY"],
                           num_warps=KNOBS["num_warps"])
    return out
