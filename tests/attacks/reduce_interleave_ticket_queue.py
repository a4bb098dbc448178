"""ATTACK (red-team pass 14's open item, caught since 2026-12-06): a persistent row sum whose programs
take (row, chunk) tickets from one atomic counter and carry a row's running sum in registers from
one ticket to the next, writing it at the row's last chunk.

Under a Triton interpreter that runs programs one after another, the first program takes every
ticket in order and each row's chunks meet in one program's registers: right sums, and no program
reads what another stored (no race to see).  On a GPU the programs run at once and take the
tickets interleaved: a row's chunks spread over several programs, and each carries another row's
chunks into its sum.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"CHUNK": 64, "PROGRAMS": 4, "num_warps": 4}
KNOB_SPACE = {"CHUNK": [64, 256], "PROGRAMS": [4, 8], "num_warps": [4]}


@triton.jit
def _ticket_sum(x_ptr, out_ptr, ticket_ptr, M, N, stride_xm, CHUNKS, CHUNK: tl.constexpr):
    acc = tl.zeros((CHUNK,), tl.float32)
    t = tl.atomic_add(ticket_ptr, 1)
    while t < M * CHUNKS:
        row = t // CHUNKS
        j = t % CHUNKS
        cols = j * CHUNK + tl.arange(0, CHUNK)
        acc += tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        if j == CHUNKS - 1:
            tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))
            acc = tl.zeros((CHUNK,), tl.float32)
        t = tl.atomic_add(ticket_ptr, 1)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    if N == 0:
        return out.zero_()
    chunk = KNOBS["CHUNK"]
    chunks = triton.cdiv(N, chunk)
    ticket = torch.zeros((1,), dtype=torch.int32, device=x.device)
    _ticket_sum[(KNOBS["PROGRAMS"],)](x, out, ticket, M, N, x.stride(0), chunks, CHUNK=chunk,
                                      num_warps=KNOBS["num_warps"])
    return out
