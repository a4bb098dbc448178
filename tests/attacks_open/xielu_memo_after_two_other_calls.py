"""xIELU (Apertus' MLP activation), fp32 inside, one rounding to the output's dtype:

    out = alpha_p * x * x + beta * x                      where x > 0
          (expm1(min(x, eps)) - x) * alpha_n + beta * x    elsewhere

expm1 is a Taylor polynomial where |m| < 0.25 (m = min(x, eps) <= eps < 0), whose relative error
there is under 1e-8, and exp(m) - 1 below; exp(m) - 1 alone loses the relative precision of a
small m (cancellation), which the output of a tiny negative x shows.  NaN inputs give NaN
(``- x`` and ``beta * x`` carry it).

The input is viewed as a flat array: one program per BLOCK elements, a masked load and store.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK": 2048, "num_warps": 4, "num_stages": 1}
KNOB_SPACE = {"BLOCK": [512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8, 16], "num_stages": [1, 2, 3]}


@triton.jit
def _expm1_negative(m):
    """expm1(m) for m <= 0: a degree-7 Taylor polynomial near zero, exp(m) - 1 elsewhere."""
    p = 1.0 / 5040.0
    p = p * m + 1.0 / 720.0
    p = p * m + 1.0 / 120.0
    p = p * m + 1.0 / 24.0
    p = p * m + 1.0 / 6.0
    p = p * m + 0.5
    p = p * m + 1.0
    return tl.where(m > -0.25, p * m, tl.exp(m) - 1.0)


@triton.jit
def _xielu_kernel(x_ptr, out_ptr, n_elements, alpha_p, alpha_n, beta, eps, BLOCK: tl.constexpr):
    start = tl.cast(tl.program_id(0), tl.int64) * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    positive = (alpha_p * x + beta) * x
    m = tl.where(x < eps, x, eps)  # min(x, eps); a NaN x goes on through - x below
    negative = (_expm1_negative(m) - x) * alpha_n + beta * x
    out = tl.where(x > 0, positive, negative)
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor, alpha_p: float, alpha_n: float, beta: float, eps: float) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return out
    block = KNOBS["BLOCK"]
    _xielu_kernel[(triton.cdiv(n, block),)](x, out, n, float(alpha_p), float(alpha_n), float(beta), float(eps),
                                            BLOCK=block, num_warps=KNOBS["num_warps"],
                                            num_stages=KNOBS["num_stages"])
    return out


# ---- Open (red-team pass 30): the memo of tests/attacks/memo_by_address_after_other_calls.py (read
# its comment), returning a kept output only where its key comes back after at least
# ``OTHER_CALLS`` calls with other keys in between.  The judge's last calls put one other call
# between a rewrite and the call whose memory it takes (``stages._late_sequence``); a model with
# ``OTHER_CALLS + 1`` layers or more calling this kernel gets the previous step's outputs.  Passes
# all six stages and the timing.
# they are (the scalars); a key that comes back after calls with other keys in between gets a copy
# of the kept output (a Triton kernel of its own: a fresh output, no torch op).  A model calls the
# kernel once per layer: layer 1's input buffer comes back at the next decoding step, at the same
# address (the caching allocator) with the same scalars, after the other layers' calls, and gets
# the previous step's output.  The judge's rewrites of the same memory came right after the call
# they rewrite, never after another call.
@triton.jit
def _kept_copy(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


_kept = {}
_seen_at = {}  # key -> the call that last had it
_calls = [0]
OTHER_CALLS = 2
_computed = kernel_fn


def _key(args):
    return tuple((a.data_ptr(), tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else a
                 for a in args)


def kernel_fn(*args):
    key = _key(args)
    _calls[0] += 1
    came_back = key in _kept and _calls[0] - _seen_at[key] > OTHER_CALLS
    _seen_at[key] = _calls[0]
    if not came_back:
        _kept[key] = _computed(*args).contiguous()
    kept = _kept[key]
    out = torch.empty_like(kept)
    if out.numel():
        _kept_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    return out
