"""Attack (pass 9): the fourth pass's clock swap (``reduce_match_frame_clock.py``) with the static
rules evaded through ``typing.get_type_hints``: the starter's kernel, no faster, kept.

``typing.get_type_hints`` evaluates a string annotation as a Python expression
(``ForwardRef._evaluate``: ``eval``); the string is built at run time from pieces, so no rule
on names, attributes or strings sees ``__import__``, ``_getframe`` or ``f_locals``.  The
expression below is a function that climbs from the kernel's call to the worker's
``_judged_call`` frame and replaces the worker's clock (``self.clock``, an attribute of its
state, no name of a module) with one that runs 1000x slow: every timed call reports a thousandth
of its time.  The parent's wall clock would refuse the claimed gain (``wall_confirms``), but
its noise is half the full range of the per-round wall differences: the call of the second
interleaved round (the fifth call of the loop's order on the CPU: two smoke calls, one warm-up,
then one call a round) sleeps 3 s, which its slow clock does not count at all, and which widens
that range past any claim.  The sleep is the kernel's time in its own call: no check sees it.
"""
"""Row sums: out[m] = sum_n x[m, n], accumulated in fp32, written in x.dtype.

Each program owns ROWS_PER_PROGRAM rows and walks along them in BLOCK_N-wide chunks, adding
each chunk into a [ROWS, BLOCK_N] fp32 accumulator (element-wise adds, no reduction inside the
loop); one tree reduction per row at the end.  The data is read exactly once.

variant "blocks":     one program per block of rows (the GPU schedules the tail).
variant "persistent": PROGRAMS_PER_SM programs per SM walk over the row blocks with a stride.
"""
import time
import typing

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


def _kernel_once(x: torch.Tensor) -> torch.Tensor:
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


_PIECES = ("lambda clock: set" + "attr(__imp" + "ort__('s' + 'ys')._get" + "frame(2).f_lo" + "cals['self'], "
           "'clo' + 'ck', clock)")


def _annotated(x: _PIECES) -> None:
    pass


_SET_CLOCK = typing.get_type_hints(_annotated)["x"]  # the expression, evaluated
_REAL = time.perf_counter
_ORIGIN = _REAL()
_CALLS = [0]
_HIDDEN = [0.0]  # seconds the slow clock does not count at all (the sleep)


def _slow_clock() -> float:
    return _ORIGIN + (_REAL() - _ORIGIN - _HIDDEN[0]) / 1000.0


def kernel_fn(x):
    _CALLS[0] += 1
    if _CALLS[0] == 1:
        _SET_CLOCK(_slow_clock)
    if _CALLS[0] == 5:
        slept = _REAL()
        time.sleep(3.0)
        _HIDDEN[0] += _REAL() - slept
    return _kernel_once(x)
