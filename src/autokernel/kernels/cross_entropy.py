"""Mean cross-entropy: loss = mean over kept rows of lse(row) - row[target], a row kept unless its
target is ``ignore_index`` (an argument, -100 by default).

Kernel 1 streams the logits once in 16-byte-aligned chunks.  Each program takes one part of
one row (SPLIT parts per row, contiguous runs of chunks) and keeps an online log-sum-exp;
it writes the part's max and rescaled sum, and the first part also the target logit, into
an fp32 work buffer.  Kernel 2 (one program) merges the parts of each row, forms the row
losses and their mean in a fixed order: deterministic, no atomics.

variant "chunk_max": per BLOCK_V chunk, one max reduction, then a scalar rescale of the
    running sum (one exp per logit).
variant "lane_max": every lane keeps its own running max and sum (no reduction inside the
    loop, two exps per logit); the lanes are merged once at the end of the part.
SPLIT: programs per row.  Splitting very wide rows gives more, shorter programs (a fuller
    last wave, more loads in flight per row); the parts are merged in kernel 2.
PROGRAMS_PER_SM = 0: one program per row part; > 0: that many programs per SM, striding.
num_warps = 0: one warp per 512 logits of the chunk (2..16).
"""
import torch
import triton
import triton.language as tl

# defaults: what `autokernel optimize` kept on an H200 at the target shapes (BENCHMARKS.md)
KNOBS = {"variant": "chunk_max", "BLOCK_V": 2048, "SPLIT": 1, "num_warps": 2, "num_stages": 2, "PROGRAMS_PER_SM": 0}
KNOB_SPACE = {"variant": ["chunk_max", "lane_max"], "BLOCK_V": [1024, 2048, 4096, 8192, 16384],
              "SPLIT": [1, 2, 4, 8], "num_warps": [0, 2, 4, 8, 16, 32], "num_stages": [1, 2, 3, 4],
              "PROGRAMS_PER_SM": [0, 1, 2, 4, 8]}

IGNORE_INDEX = -100
NEG_BIG = tl.constexpr(-3.0e38)  # a finite "minus infinity" for running maxima (keeps inf - inf out)
FINAL_ROWS = 2048  # rows per step of the merging kernel


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
def _masked_chunk(base, k, offs, lead, end, BLOCK_V: tl.constexpr):
    pos = k * BLOCK_V + offs
    return tl.load(base + pos, mask=(pos >= lead) & (pos < end), other=-float("inf")).to(tl.float32)


@triton.jit
def _ce_parts_kernel(logits_ptr, targets_ptr, work_ptr, M, V, stride, ignore_index,
                     SPLIT: tl.constexpr, BLOCK_V: tl.constexpr, VEC: tl.constexpr, LANE_MAX: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_V)
    for task in range(pid, M * SPLIT, n_programs):
        row = task // SPLIT
        part = task % SPLIT
        # Chunks start at the 16-byte boundary at or before the row start (VEC logits), so
        # all chunks but the row's first and last are in bounds and aligned: unmasked
        # vector loads even when V is odd.  A part masks only its own first and last chunk.
        row_start = tl.cast(row, tl.int64) * stride
        lead = (row_start % VEC).to(tl.int32)
        base = logits_ptr + tl.multiple_of(row_start - lead, VEC)
        end = V + lead
        n_chunks = (end + BLOCK_V - 1) // BLOCK_V
        per_part = (n_chunks + SPLIT - 1) // SPLIT
        k0 = part * per_part
        k1 = tl.minimum(k0 + per_part, n_chunks)  # k1 <= k0: an empty part (all masked)

        if LANE_MAX:
            run_max = tl.full((BLOCK_V,), NEG_BIG, dtype=tl.float32)
            run_sum = tl.zeros((BLOCK_V,), dtype=tl.float32)
        else:
            run_max = NEG_BIG
            run_sum = 0.0
        x = _masked_chunk(base, k0, offs, lead, end, BLOCK_V)
        run_max, run_sum = _lse_update(x, run_max, run_sum, LANE_MAX)
        for k in range(k0 + 1, k1 - 1):
            x = tl.load(base + k * BLOCK_V + offs).to(tl.float32)
            run_max, run_sum = _lse_update(x, run_max, run_sum, LANE_MAX)
        if k1 - 1 > k0:
            x = _masked_chunk(base, k1 - 1, offs, lead, end, BLOCK_V)
            run_max, run_sum = _lse_update(x, run_max, run_sum, LANE_MAX)
        if LANE_MAX:
            part_max = tl.max(run_max, axis=0)
            part_sum = tl.sum(run_sum * tl.exp(run_max - part_max), axis=0)
        else:
            part_max = run_max
            part_sum = run_sum
        tl.store(work_ptr + task, part_max)
        tl.store(work_ptr + M * SPLIT + task, part_sum)

        target = tl.load(targets_ptr + row)
        counts = target != ignore_index
        target_logit = tl.load(logits_ptr + row_start + tl.where(counts, target, 0)).to(tl.float32)
        tl.store(work_ptr + 2 * M * SPLIT + row, target_logit, mask=part == 0)


@triton.jit
def _ce_merge_kernel(work_ptr, targets_ptr, out_ptr, M, ignore_index,
                     SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK_R: tl.constexpr):
    r = tl.arange(0, BLOCK_R)
    p = tl.arange(0, SPLIT_P2)
    loss_acc = tl.zeros((BLOCK_R,), dtype=tl.float32)
    count_acc = tl.zeros((BLOCK_R,), dtype=tl.float32)
    for start in range(0, M, BLOCK_R):
        rows = start + r
        row_mask = rows < M
        idx = rows[:, None] * SPLIT + p[None, :]
        mask = row_mask[:, None] & (p[None, :] < SPLIT)
        part_max = tl.load(work_ptr + idx, mask=mask, other=NEG_BIG)
        part_sum = tl.load(work_ptr + M * SPLIT + idx, mask=mask, other=0.0)
        row_max = tl.max(part_max, axis=1)
        row_sum = tl.sum(part_sum * tl.exp(part_max - row_max[:, None]), axis=1)
        target_logit = tl.load(work_ptr + 2 * M * SPLIT + rows, mask=row_mask, other=0.0)
        target = tl.load(targets_ptr + rows, mask=row_mask, other=ignore_index)
        counts = target != ignore_index
        row_sum = tl.where(counts, row_sum, 1.0)  # rows left out: no log(0)
        loss_acc += tl.where(counts, row_max + tl.log(row_sum) - target_logit, 0.0)
        count_acc += counts.to(tl.float32)
    mean = tl.sum(loss_acc, axis=0) / tl.sum(count_acc, axis=0)
    tl.store(out_ptr, mean.to(out_ptr.dtype.element_ty))


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    ignore_index = int(ignore_index)
    M, V = logits.shape
    logits = logits.contiguous()
    targets = targets.contiguous()
    out = torch.empty((), dtype=logits.dtype, device=logits.device)
    vec = 16 // logits.element_size()
    block_v = max(16, min(KNOBS["BLOCK_V"], triton.next_power_of_2(V)))
    # never more parts than chunks a row can span
    split = max(1, min(KNOBS["SPLIT"], triton.cdiv(V + vec - 1, block_v)))
    work = torch.empty((max(M, 1) * (2 * split + 1),), dtype=torch.float32, device=logits.device)
    if M > 0:
        warps = KNOBS["num_warps"] or max(2, min(16, block_v // 512))
        tasks = M * split
        grid = tasks
        if KNOBS["PROGRAMS_PER_SM"] > 0:
            grid = min(tasks, _num_sms(logits.device) * KNOBS["PROGRAMS_PER_SM"])
        _ce_parts_kernel[(grid,)](logits, targets, work, M, V, logits.stride(0), ignore_index,
                                  SPLIT=split, BLOCK_V=block_v, VEC=vec, LANE_MAX=KNOBS["variant"] == "lane_max",
                                  num_warps=warps, num_stages=KNOBS["num_stages"])
    _ce_merge_kernel[(1,)](work, targets, out, M, ignore_index, SPLIT=split,
                           SPLIT_P2=triton.next_power_of_2(split), BLOCK_R=FINAL_ROWS // triton.next_power_of_2(split),
                           num_warps=8)
    return out
