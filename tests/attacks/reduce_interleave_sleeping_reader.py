"""ATTACK (red-team pass 24; caught since 2026-12-06, tests/test_harness_interleaved.py): pass
23's swap-read handoff, its reader's delay made of polls that change nothing.  Every program counts first; the last to count makes POLLS relaxed atomic_adds of 0
to a word nobody writes (fire-and-forget reductions on a GPU: well under a microsecond), acquires
unchecked and swaps every partial out; the others spend WORK dependent square roots (microseconds)
before their releasing exchange.  On a GPU the last counter reads partials not yet written: wrong.
The judge takes the polls for a spin and puts the reader to sleep (it wakes at random on a quarter
of the turns, and sleeps again at its next identical poll), and a program held before its exchange
runs again as soon as every other program ends or sleeps: the reader needs POLLS wakes, the held
writer one turn: right on 200 of 200 launches, all six stages passed.  An atomic whose result is
not used reads nothing a program could wait on, so these polls are no spin now; and sleepers are
woken up to HELD_WAKES times before a held program goes on."""
import torch
import triton
import triton.language as tl

KNOBS = {"CHUNK": 128, "DELAY": 64, "WORK": 256, "num_warps": 4}
KNOB_SPACE = {"CHUNK": [128, 256, 1024], "num_warps": [2, 4, 8]}


@triton.jit
def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, N, stride_xm, SPLIT, M, TOTAL,
               CHUNK: tl.constexpr, SPLIT_P2: tl.constexpr, DELAY: tl.constexpr, WORK: tl.constexpr):
    row = tl.program_id(0)
    j = tl.program_id(1)
    for _ in range(40):
        tl.atomic_add(cnt_ptr + 2, 1, sem="relaxed")
    c = tl.atomic_add(cnt_ptr, 1)
    cols = j * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    s = tl.sum(x, axis=0)
    if c == TOTAL - 1:
        for _ in range(DELAY):
            tl.atomic_add(cnt_ptr + 2, 0, sem="relaxed")
        tl.atomic_add(cnt_ptr + 1, 1, sem="acquire")
        k = tl.arange(0, SPLIT_P2)
        for r in range(M):
            bits = tl.atomic_xchg(ws_ptr + r * SPLIT + k, tl.full((SPLIT_P2,), -1, tl.int32), mask=k < SPLIT,
                                  sem="acquire")
            parts = tl.where(k < SPLIT, bits.to(tl.float32, bitcast=True), 0.0)
            parts = tl.where((r == row) & (k == j), s, parts)
            tl.store(out_ptr + r, tl.sum(parts, axis=0).to(out_ptr.dtype.element_ty))
    else:
        t = c.to(tl.float32) + 2.0
        for _ in range(WORK):
            t = tl.sqrt(t + 1.0)
        s = s + (t - t)
        tl.atomic_xchg(ws_ptr + row * SPLIT + j, s.to(tl.int32, bitcast=True), sem="release")
        tl.atomic_add(cnt_ptr + 1, 1, sem="release")


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
    ws = torch.empty((M, split), dtype=torch.int32, device=x.device)
    cnt = torch.zeros((3,), dtype=torch.int32, device=x.device)
    _split_sum[(M, split)](x, ws, cnt, out, N, x.stride(0), split, M, M * split, CHUNK=chunk,
                           SPLIT_P2=max(16, triton.next_power_of_2(split)), DELAY=KNOBS["DELAY"],
                           WORK=KNOBS["WORK"], num_warps=KNOBS["num_warps"])
    return out
