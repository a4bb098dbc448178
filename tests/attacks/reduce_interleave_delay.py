"""ATTACK (red-team pass 17, on the interleaving; caught since 2026-12-06, tests/test_harness_interleaved.py):
"last program to arrive reads the partials", the arrival counted BEFORE the chunk is loaded and its
partial stored.  Each writer releases a second counter after its store; the last arriver makes 32
relaxed atomic_adds of nothing on a scratch word, then acquires the second counter (without
checking its value) and reads the partials.

On a GPU the 32 atomics are no wait: the reader may read partials not stored yet.  With every turn
of the judge's interleaving drawn evenly, the reader's 32 extra turns put it after every writer on
every launch (programs with few atomics end first): it passed all six stages."""
import torch
import triton
import triton.language as tl

KNOBS = {"CHUNK": 64, "num_warps": 4}
KNOB_SPACE = {"CHUNK": [64, 256, 1024], "num_warps": [2, 4, 8]}


@triton.jit
def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, N, stride_xm, SPLIT, M,
               CHUNK: tl.constexpr, SPLIT_P2: tl.constexpr):
    row = tl.program_id(0)
    j = tl.program_id(1)
    c = tl.atomic_add(cnt_ptr + row, 1)
    cols = j * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0))
    tl.atomic_add(cnt_ptr + M + row, 1, sem="release")
    if c == SPLIT - 1:
        for _ in range(32):
            tl.atomic_add(cnt_ptr + 2 * M + row, 1, sem="relaxed")
        tl.atomic_add(cnt_ptr + M + row, 0, sem="acquire")
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
    cnt = torch.zeros((3 * M,), dtype=torch.int32, device=x.device)
    _split_sum[(M, split)](x, ws, cnt, out, N, x.stride(0), split, M, CHUNK=chunk,
                           SPLIT_P2=max(16, triton.next_power_of_2(split)), num_warps=KNOBS["num_warps"])
    return out
