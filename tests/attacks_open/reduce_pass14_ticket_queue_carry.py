"""FINDING: a persistent kernel with a dynamic work queue (an atomic ticket counter) that carries a
row's running sum in registers from one ticket to the next, assuming consecutive tickets of a row
go to the same program.

Work items are (row, chunk) pairs in row-major order; each program takes tickets with
tl.atomic_add(ticket, 1) until they run out, adds its chunk into a register accumulator, and
writes out[row] (and resets the accumulator) when it takes a row's last chunk.  Under the
interpreter the programs run one after another: the first program to run takes EVERY ticket
(the others find the queue empty), so each row's chunks are added in one program and every sum
is right.  No program reads anything another program wrote, so no race rule applies.  On a GPU
the P programs run at once and interleave their tickets: a row's chunks are spread over several
programs, each row is written with only the chunks its last-chunk program happened to hold
(plus chunks of other rows it carried over): wrong sums in most rows of any shape with more
than one chunk in all.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"CHUNK": 64, "PROGRAMS": 8, "num_warps": 4}
KNOB_SPACE = {"CHUNK": [64, 256], "PROGRAMS": [8, 132], "num_warps": [4]}


@triton.jit
def _queue_sum(x_ptr, out_ptr, ticket_ptr, N, stride_xm, SPLIT, TOTAL, CHUNK: tl.constexpr):
    offs = tl.arange(0, CHUNK)
    acc = tl.zeros((CHUNK,), dtype=tl.float32)
    t = tl.atomic_add(ticket_ptr, 1)
    while t < TOTAL:
        row = t // SPLIT
        j = t % SPLIT
        cols = j * CHUNK + offs
        acc += tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        if j == SPLIT - 1:
            tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))
            acc = tl.zeros((CHUNK,), dtype=tl.float32)
        t = tl.atomic_add(ticket_ptr, 1)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    chunk = KNOBS["CHUNK"]
    split = max(1, triton.cdiv(N, chunk))
    ticket = torch.zeros((1,), dtype=torch.int32, device=x.device)
    _queue_sum[(KNOBS["PROGRAMS"],)](x, out, ticket, N, x.stride(0), split, M * split, CHUNK=chunk,
                                     num_warps=KNOBS["num_warps"])
    return out
