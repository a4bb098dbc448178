"""ATTACK (red-team pass 12): split-row sum, "the last program to arrive finishes the row", with the
arrival counter kept by a plain load + store (no atomics anywhere: the rule says no atomics).

Each row is cut into SPLIT chunks, one program each (grid M x SPLIT: more parallelism for few
long rows).  A program writes its chunk's fp32 partial to a workspace, then bumps the row's
counter with `c = load(cnt); store(cnt, c + 1)`; the program that read SPLIT - 1 adds the SPLIT
partials in a fixed order (bitwise deterministic) and writes the row's sum.

Under the Triton interpreter the programs of a launch run one after another (in a shuffled
order): each read-modify-write is alone, exactly one program reads SPLIT - 1, and by then every
partial is written.  On a GPU the programs run at once: two programs read the same count (a lost
update: no program reaches SPLIT - 1 and the row is never written), and a partial stored by
another program need not be visible yet (no fence).
"""
import torch
import triton
import triton.language as tl

KNOBS = {"CHUNK": 64, "num_warps": 4}
KNOB_SPACE = {"CHUNK": [64, 256, 1024], "num_warps": [2, 4, 8]}


@triton.jit
def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, N, stride_xm, SPLIT,
               CHUNK: tl.constexpr, SPLIT_P2: tl.constexpr):
    row = tl.program_id(0)
    j = tl.program_id(1)
    cols = j * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0))
    c = tl.load(cnt_ptr + row)
    tl.store(cnt_ptr + row, c + 1)
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
