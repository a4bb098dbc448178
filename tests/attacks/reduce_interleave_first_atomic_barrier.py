"""ATTACK (red-team pass 17, on the interleaving; caught since 2026-12-06, tests/test_harness_interleaved.py): split-row sum whose reader never waits.  Chunk j > 0 stores its partial and
publishes it with a releasing exchange of its flag; chunk 0 of the row bumps a slot of its own
(its first atomic), then "acquires" every flag of the row with one vector atomic_add of zeros
(acquire) WITHOUT checking the values, and reads the partials at once.

On a GPU, chunk 0 of every row is launched first and reads partials that chunks j > 0 have not
stored yet (they may not have started): wrong sums.  Under the judge's interleaving, every program
runs up to and including its first atomic before any program takes a turn, so every writer has
stored and released before any reader's second atomic (its acquire): right, and ordered."""
import torch
import triton
import triton.language as tl

KNOBS = {"CHUNK": 64, "num_warps": 4}
KNOB_SPACE = {"CHUNK": [64, 256, 1024], "num_warps": [2, 4, 8]}


@triton.jit
def _split_sum(x_ptr, ws_ptr, flag_ptr, out_ptr, N, stride_xm, SPLIT,
               CHUNK: tl.constexpr, SPLIT_P2: tl.constexpr):
    row = tl.program_id(0)
    j = tl.program_id(1)
    cols = j * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    part = tl.sum(x, axis=0)
    base = row * SPLIT
    if j > 0:
        tl.store(ws_ptr + base + j, part)
        tl.atomic_xchg(flag_ptr + base + j, 1, sem="release")
    else:
        tl.atomic_add(flag_ptr + base, 1, sem="relaxed")
        k = tl.arange(0, SPLIT_P2)
        live = (k > 0) & (k < SPLIT)
        tl.atomic_add(flag_ptr + base + k, tl.zeros((SPLIT_P2,), tl.int32), mask=live, sem="acquire")
        parts = tl.load(ws_ptr + base + k, mask=live, other=0.0)
        tl.store(out_ptr + row, (part + tl.sum(parts, axis=0)).to(out_ptr.dtype.element_ty))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    chunk = KNOBS["CHUNK"]
    split = max(1, triton.cdiv(N, chunk))
    ws = torch.empty((M, split), dtype=torch.float32, device=x.device)
    flag = torch.zeros((M, split), dtype=torch.int32, device=x.device)
    _split_sum[(M, split)](x, ws, flag, out, N, x.stride(0), split, CHUNK=chunk,
                           SPLIT_P2=max(16, triton.next_power_of_2(split)), num_warps=KNOBS["num_warps"])
    return out
