"""How long one kernel call takes under the Triton interpreter, roughly, from a problem's shape.

On CPU every Triton program instance runs in Python over NumPy arrays: about 5 us per element
of a row-wise kernel (rmsnorm 512x1024 fp32: 2.7 s a call on one core).  The judge calls the
kernel many times per shape, so a shape whose single call nears the per-call timeout can only
time out, which would say nothing about the kernel.  ``too_slow`` lets the CLI refuse such a
shape up front, saying what to do instead.
"""
from __future__ import annotations

from dataclasses import dataclass

SECONDS_PER_ELEMENT = 2.5e-6  # per element read or written (bytes / element size)
SECONDS_PER_FLOP = 1e-9
CALLS_PER_TIMEOUT = 4  # refuse when one call is estimated at more than timeout / this


@dataclass
class InterpreterEstimate:
    shape: dict
    seconds_per_call: float


def estimate_call_seconds(problem, shape: dict, dtype) -> float:
    """Estimated interpreter seconds of one call of a kernel for ``problem`` at ``shape``."""
    import torch

    element = torch.empty((), dtype=dtype).element_size()
    try:
        elements = float(problem.bytes(shape, dtype)) / element
        flops = float(problem.flops(shape))
    except Exception:
        return 0.0
    return max(elements * SECONDS_PER_ELEMENT, flops * SECONDS_PER_FLOP)


def too_slow(problem, shapes: list[dict], dtypes: list, timeout_s: float) -> InterpreterEstimate | None:
    """The worst shape when some call is estimated beyond ``timeout_s / CALLS_PER_TIMEOUT``."""
    worst = None
    for shape in shapes:
        for dtype in dtypes:
            seconds = estimate_call_seconds(problem, shape, dtype)
            if worst is None or seconds > worst.seconds_per_call:
                worst = InterpreterEstimate(shape=shape, seconds_per_call=seconds)
    if worst is not None and worst.seconds_per_call * CALLS_PER_TIMEOUT > timeout_s:
        return worst
    return None
