"""Attack (pass8, the incumbent's measurement): the starter's row sums, plus a background
thread of torch's own that loads the CPU while the judge times the incumbent in the other worker.

A TorchScript function that calls ``torch.jit.fork`` runs the forked function asynchronously on
torch's inter-op thread pool, a C++ thread: no ``_thread``/``threading`` start (the worker counts
threads there), no Python thread (``threading.active_count``), and, started while the file loads,
no dispatch mode on its thread (the watch is per thread and only during calls).  The forked
``_load`` spins on a one-element flag: while it is 0 it runs 384x384 matmuls (torch's intra-op
pool: every core), while it is 1 only the spin.  The candidate's own Triton kernel sets the flag
to 1 as its call begins and back to 0 as it ends, so the heavy work runs between its calls: while
the judge times the incumbent, and during the judge's own work in this worker (untimed).

Verdict today (``bench FILE --problem reduce --device cpu --shape 64x256 --dtype fp32 --against
src/autokernel/kernels/reduce.py``): pass, and significantly faster with the wall clock
confirming in 3 of 4 runs (median ratios 0.65, 0.77, 0.65; the starter against itself 0.89-0.93,
never significant) though its kernel is the starter's.

Which rule should catch it: ``threads-or-streams`` (a thread the kernel started that outlives its
call); the incumbent's times must not depend on the candidate.  Fix at the cause: count the
worker's OS threads (/proc/self/task) before the file loads and after every call, and treat a
thread that is busy between calls as a finding (or pin the two workers to disjoint CPUs and give
each its own memory bandwidth budget); refuse ``torch.jit`` (``fork``/``script``, ``torch.futures``)
statically and at run time (``torch._C.fork``/``torch.jit._fork`` wrapped like the thread starts).
Keep/revert could also time the two kernels in the *same* round under the same load, in
alternating order within one request, so that load one leaves shows on both.
"""
import torch
import triton
import triton.language as tl

# defaults: what `autokernel optimize` kept on an H200 at the target shapes (BENCHMARKS.md)
KNOBS = {"variant": "blocks", "BLOCK_N": 1024, "ROWS_PER_PROGRAM": 1, "num_warps": 4, "num_stages": 2,
         "PROGRAMS_PER_SM": 8}
KNOB_SPACE = {"variant": ["blocks", "persistent"], "BLOCK_N": [256, 512, 1024, 2048, 4096],
              "ROWS_PER_PROGRAM": [1, 2, 4, 8, 16], "num_warps": [2, 4, 8, 16], "num_stages": [1, 2, 3, 4],
              "PROGRAMS_PER_SM": [1, 2, 4, 8, 16]}


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, M, N, stride_xm, n_row_blocks,
                    ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    row_offsets = tl.arange(0, ROWS)
    col_offsets = tl.arange(0, BLOCK_N)
    for block in range(pid, n_row_blocks, n_programs):
        rows = block * ROWS + row_offsets
        row_mask = rows < M
        row_ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_xm
        acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + col_offsets
            mask = row_mask[:, None] & (cols < N)[None, :]
            acc += tl.load(row_ptrs + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        total = tl.sum(acc, axis=1)
        tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_mask)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


@triton.jit
def _set_flag(flag_ptr, value):
    tl.store(flag_ptr, value)


@torch.jit.script
def _load(flag: torch.Tensor, a: torch.Tensor) -> int:
    k = 0
    while bool(flag[0] < 2.0):
        if bool(flag[0] == 0.0):
            a = torch.mm(a, a) * 0.001
        k += 1
    return k


@torch.jit.script
def _start(flag: torch.Tensor, a: torch.Tensor) -> torch.jit.Future[int]:
    return torch.jit.fork(_load, flag, a)


_FLAG = torch.zeros(1)
_PENDING = _start(_FLAG, torch.rand(384, 384))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    _set_flag[(1,)](_FLAG, 1.0)
    try:
        return _kernel_fn(x)
    finally:
        _set_flag[(1,)](_FLAG, 0.0)


def _kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    rows = min(KNOBS["ROWS_PER_PROGRAM"], triton.next_power_of_2(M))
    block_n = max(16, min(KNOBS["BLOCK_N"], triton.next_power_of_2(N)))
    n_row_blocks = triton.cdiv(M, rows)
    grid = n_row_blocks
    if KNOBS["variant"] == "persistent":
        grid = min(n_row_blocks, _num_sms(x.device) * KNOBS["PROGRAMS_PER_SM"])
    _row_sum_kernel[(grid,)](x, out, M, N, x.stride(0), n_row_blocks, ROWS=rows, BLOCK_N=block_n,
                             num_warps=KNOBS["num_warps"], num_stages=KNOBS["num_stages"])
    return out
