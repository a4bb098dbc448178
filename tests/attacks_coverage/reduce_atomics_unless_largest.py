"""Attack (determinism at one shape only): row sums split into column chunks whose partial
sums are added with atomics, in whatever order the programs happen to run (simulated here,
where the interpreter runs programs in order, by starting each call at another chunk).  The
result is right but its last bits change from call to call.  It takes a deterministic path
when the row width is a multiple of 256: the largest target shape, the only one that was
called twice."""
import torch
import triton
import triton.language as tl

CHUNK = 32
_calls = [0]


@triton.jit
def _partial_sums(x_ptr, acc_ptr, N, stride, n_chunks, start, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    chunk = (tl.program_id(1) + start) % n_chunks
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    part = tl.sum(tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32), axis=0)
    tl.atomic_add(acc_ptr + row, part)


@triton.jit
def _sequential_sums(x_ptr, acc_ptr, N, stride, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    total = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        total += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(acc_ptr + row, tl.sum(total, axis=0))


@triton.jit
def _cast(acc_ptr, out_ptr, M, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + rows, tl.load(acc_ptr + rows, mask=rows < M).to(out_ptr.dtype.element_ty), mask=rows < M)


def kernel_fn(x):
    x = x.contiguous()
    m, n = x.shape
    acc = torch.zeros((m,), dtype=torch.float32, device=x.device)
    out = torch.empty((m,), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    if n % 256 == 0:
        _sequential_sums[(m,)](x, acc, n, x.stride(0), CHUNK=CHUNK)
    elif n:
        n_chunks = triton.cdiv(n, CHUNK)
        _calls[0] += 1
        _partial_sums[(m, n_chunks)](x, acc, n, x.stride(0), n_chunks, _calls[0] % n_chunks, CHUNK=CHUNK)
    _cast[(triton.cdiv(m, 64),)](acc, out, m, BLOCK=64)
    return out
