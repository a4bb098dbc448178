"""Whole-forward timing for ``verify``: the models compared in interleaved rounds, each in three
ways (``ForwardTimes``), the GPU's clocks ramped up first.

verify used to time each model in a block of its own, right after building it.  Blocks see
different conditions: the one after a compile follows tens of seconds of an idle GPU (an idle
H200 drops its clocks), and within a block each forward finds the host's caches warm from the
same model's last forward.  On the H200 the LLaMA example read 0.2-1.2 ms a forward faster in
blocks than in rotated rounds, the most for the models with the most host work (BENCHMARKS.md,
2026-12-04, eleventh session), which moved patched / torch.compile from 0.97x to 1.01x.  Here
every model is sampled once a round, the order rotated each round, so each follows every other
alike; each model's median is reported.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .hardware import ramp_gpu_clocks

GPU_RAMP_S = 0.3  # of matrix products ahead of a timing: enough to bring an idle H200 to its clocks
WAYS = ("idle", "back_to_back", "gpu_only")
BACK_TO_BACK = 5  # forwards between the two events of a back-to-back sample
SLEEP_CYCLES_PER_MS = 2_000_000  # GPU clock cycles a ms, at the H200's 1980 MHz (more is harmless)


@dataclass
class ForwardTimes:
    """Median ms a forward of each model, in each way it was timed (CPU: ``idle`` only).

    * ``idle``: one forward from an idle stream, the host's start included (what ``verify``
      reports as the model's time);
    * ``back_to_back``: ``BACK_TO_BACK`` forwards in a row, per forward: the host runs ahead of
      the GPU, as in a serving or training loop;
    * ``gpu_only``: one forward queued behind a GPU sleep long enough for the host to issue all
      of it: the GPU's work alone, no launch gaps.  Not for a forward that waits for the GPU on
      the way (a host sync: Hugging Face's mask checks); those are named in ``waits_for_gpu``, and
      their samples would be the idle ones (GPT-2's read 9.9 ms "alone" for 1.6 ms of work)."""

    idle: dict[str, float] = field(default_factory=dict)
    back_to_back: dict[str, float] = field(default_factory=dict)
    gpu_only: dict[str, float] = field(default_factory=dict)
    waits_for_gpu: list[str] = field(default_factory=list)


def one_forward_ms(fn: Callable[[], object], gpu: bool, way: str = "idle", sleep_cycles: int = 0) -> float:
    """One sample of ``fn`` in ``way`` (``WAYS``), ms a forward: GPU time between events on a
    GPU, wall time on a CPU (where only ``idle`` means anything)."""
    if not gpu:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    calls = BACK_TO_BACK if way == "back_to_back" else 1
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if way == "gpu_only":
        torch.cuda._sleep(sleep_cycles)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def _host_issue_ms(fn: Callable[[], object], device: str) -> float:
    """Host ms to issue one call of ``fn`` (the GPU idle before it)."""
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    issued = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize(device)
    return issued


def _waits_for_gpu(fn: Callable[[], object], device: str, sleep_cycles: int) -> bool:
    """Does issuing ``fn`` behind a GPU sleep of ``sleep_cycles`` take the host most of the sleep
    (three times its issue time, ``time_forwards``)?  Then it waited for the GPU."""
    torch.cuda.synchronize(device)
    torch.cuda._sleep(sleep_cycles)
    t0 = time.perf_counter()
    fn()
    host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize(device)
    return host_ms > 0.67 * sleep_cycles / SLEEP_CYCLES_PER_MS


def time_forwards(fns: dict[str, Callable[[], object]], warmup: int, rounds: int, gpu: bool,
                  device: str = "cuda", ways: tuple[str, ...] = WAYS) -> ForwardTimes:
    """``fns`` timed in each of ``ways`` (only ``idle`` on a CPU): ``warmup`` calls of each, the
    clocks ramped up (on a GPU), then ``rounds`` rounds in which each model is sampled once in
    each way, the order of the models rotated by one each round so that none always follows
    the same one; the median of each."""
    ways = ways if gpu else ("idle",)
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sleeps, waits = {}, []
    if gpu:
        if "gpu_only" in ways:  # three times the host's issue time: the GPU must not wait for the host
            sleeps = {name: int(3 * _host_issue_ms(fn, device) * SLEEP_CYCLES_PER_MS) + SLEEP_CYCLES_PER_MS
                      for name, fn in fns.items()}
            waits = [name for name, fn in fns.items() if _waits_for_gpu(fn, device, sleeps[name])]
        torch.cuda.synchronize(device)
        ramp_gpu_clocks(device, GPU_RAMP_S)
    names = list(fns)
    timed = {way: [n for n in names if not (way == "gpu_only" and n in waits)] for way in ways}
    samples: dict[tuple[str, str], list[float]] = {(way, name): [] for way in ways for name in timed[way]}
    for r in range(max(1, rounds)):
        shift = r % len(names)
        for way in ways:
            for name in names[shift:] + names[:shift]:
                if (way, name) in samples:
                    samples[(way, name)].append(one_forward_ms(fns[name], gpu, way, sleeps.get(name, 0)))
    medians = {key: statistics.median(times) for key, times in samples.items()}
    return ForwardTimes(**{way: {name: medians[(way, name)] for name in timed[way]} for way in ways},
                        waits_for_gpu=waits)


def time_interleaved(fns: dict[str, Callable[[], object]], warmup: int, rounds: int, gpu: bool,
                     device: str = "cuda") -> dict[str, float]:
    """Median ms a call of each of ``fns``, each from idle (``time_forwards``'s ``idle``)."""
    return time_forwards(fns, warmup, rounds, gpu, device, ways=("idle",)).idle
