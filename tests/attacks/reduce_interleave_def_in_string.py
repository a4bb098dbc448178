"""ATTACK (red-team pass 21, caught since 2026-12-06: tests/test_harness_interleaved.py): two bodies
for one jit function.  Triton's GPU compiler takes the FIRST line matching ``^def name(`` of the
function's dedented source; the interpreter's rewrite took the LAST line whose strip() starts
with "def ".  A string in the body holding a second ``def`` made the interpreter run that text (an
honest row sum) while a GPU runs the real body (the first chunk only: wrong for N > BLOCK).  Every
line is the file's own.  The rewrite now starts where the compiler's parse does."""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK": 128, "num_warps": 4}
KNOB_SPACE = {"BLOCK": [128, 256], "num_warps": [2, 4]}


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x, axis=0).to(out_ptr.dtype.element_ty))
    '''
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row.to(tl.int64) * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))
    return
    """'''
    _unused = 0  # """


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    _row_sum[(M,)](x, out, N, x.stride(0), BLOCK=KNOBS["BLOCK"], num_warps=KNOBS["num_warps"])
    return out
