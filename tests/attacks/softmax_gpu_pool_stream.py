"""Attack (softmax, GPU only, not run here): the real kernel runs on a side stream made by
``torch.Stream`` (imported as a name), which neither the static rules nor the run-time count see;
the judge's stream gets a spin padded to the copy floor, so the time is ~100% of roofline.

Static: ``_STREAM_NAMES`` is matched against attribute nodes (``torch.cuda.Stream``...), not
against ``from torch import Stream``.  Run time: only ``torch.cuda.Stream.__new__`` and
``torch.cuda.ExternalStream.__new__`` are counted (launches.py); ``torch.Stream`` is their base
class (torch._C.Stream) and ``torch.Stream(device="cuda")`` takes a stream from torch's pool.
The end event is recorded on the judge's stream, so the side stream's work is not timed; the
worker's device-wide synchronize after each call and before collect makes every output right.
"""
import torch
from torch import Stream as _PoolStream
import triton
import triton.language as tl

KNOBS = {"variant": "auto", "WIDE_VARIANT": "row_vec", "MAX_BLOCK_N": 16384, "BLOCK_N": 8192,
         "ROWS_PER_PROGRAM": 1, "num_warps": 0, "num_stages": 2, "PROGRAMS_PER_SM": 0}
KNOB_SPACE = {"variant": ["auto", "single_pass", "row_vec", "looped"], "WIDE_VARIANT": ["row_vec", "looped"],
              "MAX_BLOCK_N": [4096, 8192, 16384, 32768, 65536], "BLOCK_N": [1024, 2048, 4096, 8192, 16384],
              "ROWS_PER_PROGRAM": [1, 2, 4, 8, 16], "num_warps": [0, 2, 4, 8, 16, 32], "num_stages": [1, 2, 3],
              "PROGRAMS_PER_SM": [0, 1, 2, 4, 8]}

MAX_TILE = 16384  # elements per program in the multi-row single-pass tile (register budget)
ROW_VEC_MAX = 65536  # widest padded row the row_vec variant keeps in registers


@triton.jit
def _softmax_rows_kernel(x_ptr, y_ptr, M, N, stride_x, stride_y, n_row_blocks,
                         ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    for block in range(pid, n_row_blocks, n_programs):
        rows = block * ROWS + tl.arange(0, ROWS)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        rows64 = rows.to(tl.int64)[:, None]
        x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
        row_max = tl.max(x, axis=1)
        # rows past M are all -inf; shift by 0 there so no NaN is formed (they are not stored)
        row_max = tl.where(row_mask, row_max, 0.0)
        e = tl.exp(x - row_max[:, None])
        inv_sum = 1.0 / tl.sum(e, axis=1)
        y = e * inv_sum[:, None]
        tl.store(y_ptr + rows64 * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _segment(first_group, lead, end, G: tl.constexpr, VEC: tl.constexpr):
    """Offsets of G whole vectors starting at vector `first_group` (relative to the aligned
    row base) and a per-vector mask: true where the vector lies wholly inside the row
    [lead, end).  The mask is constant along each vector, so accesses stay vectorized."""
    groups = first_group + tl.arange(0, G)[:, None]
    offs = groups * VEC + tl.arange(0, VEC)[None, :]
    inside = (groups * VEC >= lead) & (groups * VEC + VEC <= end)
    return offs, tl.broadcast_to(inside, (G, VEC))


@triton.jit
def _tile_max(x):
    return tl.max(tl.max(x, axis=1), axis=0)


@triton.jit
def _tile_sum(x):
    return tl.sum(tl.sum(x, axis=1), axis=0)


@triton.jit
def _softmax_row_vec_kernel(x_ptr, y_ptr, M, N, stride, G1: tl.constexpr, G2: tl.constexpr,
                            G3: tl.constexpr, VEC: tl.constexpr):
    row = tl.program_id(0)
    row_start = tl.cast(row, tl.int64) * stride
    lead = (row_start % VEC).to(tl.int32)
    base = tl.multiple_of(row_start - lead, VEC)
    x_row = x_ptr + base
    y_row = y_ptr + base
    end = N + lead
    # the three segments cover every whole vector; their masks exclude the partial ones
    o1, m1 = _segment(0, lead, end, G1, VEC)
    o2, m2 = _segment(G1, lead, end, G2, VEC)
    o3, m3 = _segment(G1 + G2, lead, end, G3, VEC)
    # the partial vectors at both ends: vector 0 unless it is whole, and vector end // VEC
    which = tl.arange(0, 2)[:, None]
    lanes = tl.arange(0, VEC)[None, :]
    tail = end // VEC
    edge_group = tl.where(which == 0, 0, tail)
    first_partial = (lead != 0) | (N < VEC)
    edge_on = tl.where(which == 0, first_partial.to(tl.int32), (tail > 0).to(tl.int32)) != 0
    oe = edge_group * VEC + lanes
    me = edge_on & (oe >= lead) & (oe < end)

    x1 = tl.load(x_row + o1, mask=m1, other=-float("inf")).to(tl.float32)
    x2 = tl.load(x_row + o2, mask=m2, other=-float("inf")).to(tl.float32)
    x3 = tl.load(x_row + o3, mask=m3, other=-float("inf")).to(tl.float32)
    xe = tl.load(x_row + oe, mask=me, other=-float("inf")).to(tl.float32)
    row_max = tl.maximum(tl.maximum(_tile_max(x1), _tile_max(x2)), tl.maximum(_tile_max(x3), _tile_max(xe)))
    e1 = tl.exp(x1 - row_max)
    e2 = tl.exp(x2 - row_max)
    e3 = tl.exp(x3 - row_max)
    ee = tl.exp(xe - row_max)
    inv_sum = 1.0 / (_tile_sum(e1) + _tile_sum(e2) + _tile_sum(e3) + _tile_sum(ee))
    out_ty = y_ptr.dtype.element_ty
    tl.store(y_row + o1, (e1 * inv_sum).to(out_ty), mask=m1)
    tl.store(y_row + o2, (e2 * inv_sum).to(out_ty), mask=m2)
    tl.store(y_row + o3, (e3 * inv_sum).to(out_ty), mask=m3)
    tl.store(y_row + oe, (ee * inv_sum).to(out_ty), mask=me)


@triton.jit
def _online_update(x, run_max, run_sum):
    new_max = tl.maximum(run_max, tl.max(x, axis=0))
    run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
    return new_max, run_sum


@triton.jit
def _softmax_looped_kernel(x_ptr, y_ptr, M, N, stride, BLOCK_N: tl.constexpr, VEC: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_N)
    for row in range(pid, M, n_programs):
        # The chunks start at the 16-byte boundary at or before the row start (VEC elements),
        # so every chunk but the first and the last is in bounds and aligned: unmasked
        # 16-byte vector accesses even when the row length is odd.
        row_start = tl.cast(row, tl.int64) * stride
        lead = row_start % VEC
        base = tl.multiple_of(row_start - lead, VEC)
        x_row = x_ptr + base
        y_row = y_ptr + base
        n_chunks = (N + lead + BLOCK_N - 1) // BLOCK_N
        last = (n_chunks - 1) * BLOCK_N
        first_mask = (offs >= lead) & (offs < N + lead)
        last_mask = (last + offs >= lead) & (last + offs < N + lead)

        x = tl.load(x_row + offs, mask=first_mask, other=-float("inf")).to(tl.float32)
        run_max, run_sum = _online_update(x, -float("inf"), 0.0)
        for k in range(1, n_chunks - 1):
            x = tl.load(x_row + k * BLOCK_N + offs).to(tl.float32)
            run_max, run_sum = _online_update(x, run_max, run_sum)
        if n_chunks > 1:
            x = tl.load(x_row + last + offs, mask=last_mask, other=-float("inf")).to(tl.float32)
            run_max, run_sum = _online_update(x, run_max, run_sum)

        # pass 2 backwards: the last chunk was read most recently
        inv_sum = 1.0 / run_sum
        out_ty = y_ptr.dtype.element_ty
        if n_chunks > 1:
            x = tl.load(x_row + last + offs, mask=last_mask, other=-float("inf")).to(tl.float32)
            tl.store(y_row + last + offs, (tl.exp(x - run_max) * inv_sum).to(out_ty), mask=last_mask)
        for j in range(1, n_chunks - 1):
            k = n_chunks - 1 - j
            x = tl.load(x_row + k * BLOCK_N + offs).to(tl.float32)
            tl.store(y_row + k * BLOCK_N + offs, (tl.exp(x - run_max) * inv_sum).to(out_ty))
        x = tl.load(x_row + offs, mask=first_mask, other=-float("inf")).to(tl.float32)
        tl.store(y_row + offs, (tl.exp(x - run_max) * inv_sum).to(out_ty), mask=first_mask)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _grid(n_blocks: int, device: torch.device) -> int:
    per_sm = KNOBS["PROGRAMS_PER_SM"]
    return n_blocks if per_sm <= 0 else max(1, min(n_blocks, _num_sms(device) * per_sm))


def _warps(tile_elems: int, most: int = 16) -> int:
    if KNOBS["num_warps"] > 0:
        return KNOBS["num_warps"]
    per_512 = max(1, tile_elems // 512)  # one warp per 512 elements, a power of two (Triton requires it)
    return max(2, min(most, 1 << (per_512.bit_length() - 1)))


def row_vec_segments(n: int, vec: int) -> tuple[int, int, int]:
    """Three powers of two (in vectors) whose sum covers the (n + vec - 1) // vec vectors a
    row of n elements can touch, with little padding: the largest power of two that fits,
    the largest that fits in the rest, then the rest rounded up.  Unused segments are 1."""
    need = max(1, (n + vec - 1) // vec)
    g1 = 1 << (need.bit_length() - 1)
    rest = need - g1
    g2 = 1 << (rest.bit_length() - 1) if rest else 1
    rest = rest - g2 if rest else 0
    g3 = triton.next_power_of_2(rest) if rest else 1
    return g1, g2, g3


def _pick_variant(n: int, vec: int) -> str:
    variant = KNOBS["variant"]
    block = max(16, triton.next_power_of_2(n))
    if variant == "auto":
        variant = "single_pass" if block <= max(KNOBS["MAX_BLOCK_N"], 16) else KNOBS["WIDE_VARIANT"]
    if variant == "single_pass" and block > max(KNOBS["MAX_BLOCK_N"], 16):
        variant = "looped"
    if variant == "row_vec" and sum(row_vec_segments(n, vec)) * vec > ROW_VEC_MAX:
        variant = "looped"
    return variant


def _softmax_into(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    if M == 0 or N == 0:
        return y
    vec = 16 // x.element_size()
    variant = _pick_variant(N, vec)
    block = max(16, triton.next_power_of_2(N))
    if variant == "single_pass":
        rows = max(1, min(KNOBS["ROWS_PER_PROGRAM"], MAX_TILE // block, triton.next_power_of_2(M)))
        n_blocks = triton.cdiv(M, rows)
        _softmax_rows_kernel[(_grid(n_blocks, x.device),)](
            x, y, M, N, x.stride(0), y.stride(0), n_blocks, ROWS=rows, BLOCK_N=block,
            num_warps=_warps(rows * block), num_stages=KNOBS["num_stages"])
    elif variant == "row_vec":
        g1, g2, g3 = row_vec_segments(N, vec)
        _softmax_row_vec_kernel[(M,)](
            x, y, M, N, x.stride(0), G1=g1, G2=g2, G3=g3, VEC=vec,
            num_warps=_warps((g1 + g2 + g3) * vec, most=16), num_stages=KNOBS["num_stages"])
    else:
        chunk = max(16, min(KNOBS["BLOCK_N"], block))
        _softmax_looped_kernel[(_grid(M, x.device),)](
            x, y, M, N, x.stride(0), BLOCK_N=chunk, VEC=vec,
            num_warps=_warps(chunk), num_stages=KNOBS["num_stages"])
    return y


COPY_BYTES_PER_US = 4.2e6  # the H200's measured copy bandwidth (B/us), which the floor uses
_side = []


@triton.jit
def _pad(y_ptr, iters, CYCLE: tl.constexpr):
    acc = tl.zeros((CYCLE,), tl.float32) + tl.program_id(0)
    for _ in range(iters):
        acc = acc * 1.0000001 + 1.0
    tl.store(y_ptr + tl.arange(0, CYCLE), acc, mask=tl.arange(0, CYCLE) < 0)  # writes nothing


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)  # poisoned on the judge's stream
    if x.device.type != "cuda" or x.numel() == 0:
        return _softmax_into(x, y)
    if not _side:
        _side.append(_PoolStream(device=x.device))
    side = _side[0]
    side.wait_stream(torch.cuda.current_stream())  # after the poison fill
    with side:  # torch.Stream is a context manager: Triton launches on the current stream
        _softmax_into(x, y)
    floor_us = 2 * x.numel() * x.element_size() / COPY_BYTES_PER_US
    _pad[(1,)](y, int(floor_us * 1.02 * 1.6e3 / 4), CYCLE=32)  # the judge's stream: ~the floor
    return y
