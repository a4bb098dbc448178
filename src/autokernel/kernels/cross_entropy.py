"""Mean cross-entropy with ignore_index=-100: loss = mean over kept rows of lse(row) - row[target].

Kernel 1 streams each row once in 16-byte-aligned chunks, keeping an online log-sum-exp, and writes the row's loss
and whether it counts into an fp32 work buffer.  Kernel 2 (one program) adds those up in a
fixed order and divides: deterministic, no atomics.

variant "chunk_max": per BLOCK_V chunk, one max reduction, then a scalar rescale of the
    running sum (one exp per logit).
variant "lane_max": every lane keeps its own running max and sum (no reduction inside the
    loop, two exps per logit); the lanes are merged once at the end of the row.
PROGRAMS_PER_SM = 0: one program per row; > 0: that many programs per SM, striding.
num_warps = 0: one warp per 512 logits of the chunk (2..16).
"""
import torch
import triton
import triton.language as tl

KNOBS = {"variant": "chunk_max", "BLOCK_V": 8192, "num_warps": 0, "num_stages": 2, "PROGRAMS_PER_SM": 0}
KNOB_SPACE = {"variant": ["chunk_max", "lane_max"], "BLOCK_V": [1024, 2048, 4096, 8192, 16384],
              "num_warps": [0, 2, 4, 8, 16, 32], "num_stages": [1, 2, 3, 4], "PROGRAMS_PER_SM": [0, 1, 2, 4, 8]}

IGNORE_INDEX = -100
NEG_BIG = tl.constexpr(-3.0e38)  # a finite "minus infinity" for running maxima (keeps inf - inf out)


@triton.jit
def _lse_update(x, run_max, run_sum, LANE_MAX: tl.constexpr):
    if LANE_MAX:
        new_max = tl.maximum(run_max, x)
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.exp(x - new_max)
    else:
        new_max = tl.maximum(run_max, tl.max(x, axis=0))
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
    return new_max, run_sum


@triton.jit
def _ce_rows_kernel(logits_ptr, targets_ptr, work_ptr, M, V, stride, ignore_index,
                    BLOCK_V: tl.constexpr, VEC: tl.constexpr, LANE_MAX: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_V)
    for row in range(pid, M, n_programs):
        # Chunks start at the 16-byte boundary at or before the row start (VEC logits), so
        # all chunks but the first and the last are in bounds and aligned: unmasked vector
        # loads even when V is odd.
        row_start = tl.cast(row, tl.int64) * stride
        lead = row_start % VEC
        base = logits_ptr + tl.multiple_of(row_start - lead, VEC)
        n_chunks = (V + lead + BLOCK_V - 1) // BLOCK_V
        last = (n_chunks - 1) * BLOCK_V

        if LANE_MAX:
            run_max = tl.full((BLOCK_V,), NEG_BIG, dtype=tl.float32)
            run_sum = tl.zeros((BLOCK_V,), dtype=tl.float32)
        else:
            run_max = NEG_BIG
            run_sum = 0.0
        x = tl.load(base + offs, mask=(offs >= lead) & (offs < V + lead), other=-float("inf")).to(tl.float32)
        run_max, run_sum = _lse_update(x, run_max, run_sum, LANE_MAX)
        for k in range(1, n_chunks - 1):
            x = tl.load(base + k * BLOCK_V + offs).to(tl.float32)
            run_max, run_sum = _lse_update(x, run_max, run_sum, LANE_MAX)
        if n_chunks > 1:
            x = tl.load(base + last + offs, mask=last + offs < V + lead, other=-float("inf")).to(tl.float32)
            run_max, run_sum = _lse_update(x, run_max, run_sum, LANE_MAX)
        if LANE_MAX:
            row_max = tl.max(run_max, axis=0)
            row_sum = tl.sum(run_sum * tl.exp(run_max - row_max), axis=0)
        else:
            row_max = run_max
            row_sum = run_sum

        target = tl.load(targets_ptr + row)
        counts = target != ignore_index
        target_logit = tl.load(logits_ptr + row_start + tl.where(counts, target, 0)).to(tl.float32)
        loss = tl.where(counts, row_max + tl.log(row_sum) - target_logit, 0.0)
        tl.store(work_ptr + row, loss)
        tl.store(work_ptr + M + row, counts.to(tl.float32))


@triton.jit
def _mean_kernel(work_ptr, out_ptr, M, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    loss_acc = tl.zeros((BLOCK,), dtype=tl.float32)
    count_acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, M, BLOCK):
        mask = start + offsets < M
        loss_acc += tl.load(work_ptr + start + offsets, mask=mask, other=0.0)
        count_acc += tl.load(work_ptr + M + start + offsets, mask=mask, other=0.0)
    mean = tl.sum(loss_acc, axis=0) / tl.sum(count_acc, axis=0)
    tl.store(out_ptr, mean.to(out_ptr.dtype.element_ty))


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    M, V = logits.shape
    logits = logits.contiguous()
    targets = targets.contiguous()
    out = torch.empty((), dtype=logits.dtype, device=logits.device)
    work = torch.empty((2 * max(M, 1),), dtype=torch.float32, device=logits.device)
    if M > 0:
        block_v = max(16, min(KNOBS["BLOCK_V"], triton.next_power_of_2(V)))
        warps = KNOBS["num_warps"] or max(2, min(16, block_v // 512))
        grid = M
        if KNOBS["PROGRAMS_PER_SM"] > 0:
            grid = min(M, _num_sms(logits.device) * KNOBS["PROGRAMS_PER_SM"])
        _ce_rows_kernel[(grid,)](logits, targets, work, M, V, logits.stride(0), IGNORE_INDEX,
                                 BLOCK_V=block_v, VEC=16 // logits.element_size(), LANE_MAX=KNOBS["variant"] == "lane_max",
                                 num_warps=warps, num_stages=KNOBS["num_stages"])
    _mean_kernel[(1,)](work, out, M, BLOCK=1024, num_warps=4)
    return out
