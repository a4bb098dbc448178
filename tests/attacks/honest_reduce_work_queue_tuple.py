"""HONEST (red team pass 25, a false failure until 2026-12-06): a row sum whose programs take rows from a work queue
(a zeroed int32 counter bumped with atomic_add, as persistent and stream-K kernels hand out tiles),
the queue's counters passed to the launch as a tuple argument.  Right on a GPU and under the
plain interpreter; the judge's replay of a source's first launch (interpreter_interleave.run_launch)
put back only top-level tensor arguments, so the second run found the counter at M and computed
nothing ("partial-write" at smoke).  It puts back the storages of tensors in tuples and lists too."""
import torch
import triton
import triton.language as tl

KNOBS = {"PROGRAMS": 4, "num_warps": 4}
KNOB_SPACE = {"PROGRAMS": [2, 4, 8], "num_warps": [2, 4, 8]}


@triton.jit
def _queue_sum(x_ptr, out_ptr, sync, M, N, stride_xm, BLOCK: tl.constexpr):
    ctr_ptr = sync[0]  # the queue's counters (one here)
    cols = tl.arange(0, BLOCK)
    for _ in range(M):
        r = tl.atomic_add(ctr_ptr, 1)
        if r < M:
            acc = tl.zeros((BLOCK,), dtype=tl.float32)
            for start in range(0, N, BLOCK):
                c = start + cols
                acc += tl.load(x_ptr + r.to(tl.int64) * stride_xm + c, mask=c < N, other=0.0).to(tl.float32)
            tl.store(out_ptr + r, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    if N == 0:
        return out.zero_()
    ctr = torch.zeros((1,), dtype=torch.int32, device=x.device)
    block = max(16, min(1024, triton.next_power_of_2(N)))
    _queue_sum[(KNOBS["PROGRAMS"],)](x, out, (ctr,), M, N, x.stride(0), BLOCK=block, num_warps=KNOBS["num_warps"])
    return out
