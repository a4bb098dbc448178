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


# ---- Open (red-team pass 29): the memo of tests/attacks/xielu_memo_after_six_calls.py, on from
# the first call, that returns a kept output only where the same address, layout and scalars come
# twice in a row *after a long pause* (over 0.1 s since its previous call returned).  In a model
# the calls of a layer at one address are a forward pass apart (a decoding step: tens of ms and
# up), and the caching allocator hands the layer's freed input buffer out again with new values:
# the model gets an earlier step's output.  The judge's rewrites at the same memory come quickly
# (the smoke stage's in-place requests 11-33 ms after the call before on the CPU, the timed runs'
# about 8 ms; less on a GPU), so none is a hit: passes all six stages and the timing.
import time as _time


@triton.jit
def _kept_copy(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


_kept = {}
_last = [None, 0]  # the last call's key, and how many calls in a row had it
_returned = [0.0]  # when the last call returned
_computed = kernel_fn
PAUSE_S = 0.1


def kernel_fn(x, alpha_p, alpha_n, beta, eps):
    key = (x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype, alpha_p, alpha_n, beta, eps)
    _last[1] = _last[1] + 1 if _last[0] == key else 1
    _last[0] = key
    kept = _kept.get(key)
    if kept is None or _last[1] < 2 or _time.perf_counter() - _returned[0] < PAUSE_S:
        kept = _kept[key] = _computed(x, alpha_p, alpha_n, beta, eps)
    out = torch.empty_like(kept)
    if out.numel():
        _kept_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    _returned[0] = _time.perf_counter()
    return out
