"""ATTACK (red-team pass 24; caught since 2026-12-06, tests/test_harness_interleaved.py): pass
19's late count (tests/counter_edits.py ``late_count``: each program bumps the counter BEFORE it
loads its chunk and stores its partial, then releases a second counter; the last to count reads
every partial after an unchecked acquire: wrong on a GPU, where the others are still loading), with the last arriver's delay made of POLLS relaxed atomic_adds of 0 to a word
nobody writes (fire-and-forget on a GPU) instead of atomics that change a word.  The judge takes
the polls for a spin and the reader sleeps; a writer held after its count or its store (a plain
store, or before a learned site) runs again as soon as every other program ends or sleeps: right on
200 of 200 launches, both bench runs passed."""
import torch
import triton
import triton.language as tl

KNOBS = {"CHUNK": 128, "DELAY": 64, "num_warps": 4}
KNOB_SPACE = {"CHUNK": [128, 256, 1024], "num_warps": [2, 4, 8]}


@triton.jit
def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, N, stride_xm, SPLIT, M, TOTAL,
               CHUNK: tl.constexpr, SPLIT_P2: tl.constexpr, DELAY: tl.constexpr):
    row = tl.program_id(0)
    j = tl.program_id(1)
    for _ in range(40):
        tl.atomic_add(cnt_ptr + 2, 1, sem="relaxed")
    c = tl.atomic_add(cnt_ptr, 1)
    cols = j * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0))
    tl.atomic_add(cnt_ptr + 1, 1, sem="release")
    if c == TOTAL - 1:
        for _ in range(DELAY):
            tl.atomic_add(cnt_ptr + 2, 0, sem="relaxed")
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
