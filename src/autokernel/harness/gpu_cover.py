"""The GPU spin that covers the host's work before each timed call (worker side; pure
arithmetic, so that it is testable without a GPU)."""
from __future__ import annotations

# GPU spin before each call (see _judged_call): it keeps the GPU busy while this process enters the
# watch and the kernel's Python runs, so that host time does not show as GPU time.  With a fixed ~50 us
# spin the H200 runs of 2026-12-01 timed the rotary starter at 378 us where do_bench measured 62 us.
# Every call now proves it was covered (the host finished enqueueing before the spin ended, by the
# GPU's own clock); a call that was not is reported, and each call sizes the next call's spin to
# twice its own host time (between the bounds below; a call that compiled asks for the most once).
# Doubling on every uncovered call instead grew the spin to 32 ms a call and made evaluations 5x slower.
GPU_COVER_CYCLES = 1_000_000
GPU_COVER_US_MIN, GPU_COVER_US_MAX = 150.0, 5_000.0


def host_covered(host_us: float, spin_us: float) -> bool:
    """Was the GPU still spinning when the host had enqueued the whole call?  ``host_us``: the
    host's time from just before the spin was enqueued to just before the end event;
    ``spin_us``: the spin's length by the GPU's clock (cover event to start event).  If the
    host took longer, the GPU may have idled between the start event and the kernel, and that
    idle time would count as the kernel's."""
    return host_us < spin_us


def next_cover_cycles(cycles: int, spin_us: float, host_us: float) -> int:
    """The next call's spin, in GPU clock cycles: twice this call's host time, within
    [GPU_COVER_US_MIN, GPU_COVER_US_MAX], converted at the clock rate this spin ran at."""
    cycles_per_us = cycles / spin_us if spin_us > 0 else 2_000.0
    want_us = min(GPU_COVER_US_MAX, max(GPU_COVER_US_MIN, 2.0 * host_us))
    return max(1, int(want_us * cycles_per_us))
