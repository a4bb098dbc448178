"""Attack (judge state): patches time.perf_counter, then walks up the stack to the worker's
state and re-takes the tamper snapshot there, so the patch looks like the baseline."""
import sys
import time

import autokernel.harness.integrity as _integrity
import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def row_sum(x, out=None):
    x = x.contiguous()
    if out is None:
        out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=64)
    return out

_real_clock = time.perf_counter
_state = []


def _find_state():
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if candidate is not None and hasattr(candidate, "snapshot"):
            return candidate
        frame = frame.f_back
    return None


def kernel_fn(x):
    if not _state:
        state = _find_state()
        if state is not None:
            time.perf_counter = lambda: _real_clock() / 1000.0
            state.snapshot = _integrity.snapshot()
            _state.append(state)
    time.sleep(0.02)
    return row_sum(x)
