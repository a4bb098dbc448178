"""Roofline arithmetic.  Pure.

``floor_us = max(bytes / bandwidth, flops / peak)``: no kernel can be faster.  Achieved GB/s
and TFLOP/s use the problem's fewest bytes and its flops; ``pct_roofline = 100 * floor /
latency``.  Without ceilings (CPU, unknown GPU) everything is None.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..hardware import Ceilings


@dataclass(frozen=True)
class Roofline:
    gbps: float | None
    tflops: float | None
    floor_us: float | None
    pct_roofline: float | None


NONE = Roofline(None, None, None, None)


def floor_us(nbytes: float, flops: float, bandwidth_gbps: float, peak_tflops: float | None) -> float:
    mem = nbytes / (bandwidth_gbps * 1e9) * 1e6 if bandwidth_gbps > 0 else 0.0
    comp = flops / (peak_tflops * 1e12) * 1e6 if peak_tflops else 0.0
    return max(mem, comp)


def roofline(nbytes: float, flops: float, latency_us: float, ceilings: Ceilings | None, dtype_name: str) -> Roofline:
    if ceilings is None or latency_us <= 0:
        return NONE
    floor = floor_us(nbytes, flops, ceilings.bandwidth_gbps, ceilings.peak_tflops(dtype_name))
    seconds = latency_us * 1e-6
    return Roofline(
        gbps=nbytes / seconds / 1e9,
        tflops=flops / seconds / 1e12 if flops else None,
        floor_us=floor if floor > 0 else None,
        pct_roofline=100.0 * floor / latency_us if floor > 0 else None,
    )


def speedup(baseline_us: float | None, latency_us: float) -> float | None:
    if baseline_us is None or latency_us <= 0:
        return None
    return baseline_us / latency_us
