"""Kernels the patched model runs faster without (``verify`` measures them, ``apply`` leaves them out).

The judge scores a kernel by its GPU work, and the selection (``selection.py``) applies a kernel
whose GPU work beats PyTorch's.  A launch-bound forward pays each op's host time instead: a
Triton launch from Python costs 2-3x an ATen op's (BENCHMARKS.md, third session), and outside
CUDA graphs hf:gpt2 and hf:bert at 4x512 tokens ran 13.4 and 10.2 ms patched against 12.3 and
7.4 ms eager (sixteenth session) though every kernel applied was faster than PyTorch's on the GPU.
So ``verify``, timing the patched model on a GPU outside CUDA graphs, also times it without each
kernel in turn and, where the model is faster without some, without all of those together; when
that model is faster than the one with every kernel, it records the choice (``verify.json``,
``in_model_choice``) and ``apply(in_model="auto")`` leaves those kernels out on that kind of GPU,
for exactly those kernel files, in that mode.  In CUDA-graph mode launches cost nothing, but a kernel can still lose in the
model where it won alone (the capture takes other paths than the profiled forward: transformers
builds the whole attention mask then), so in CUDA-graph mode ``verify`` captures each variant as
a graph of its own and times it the same way (first run on an H100 on 2026-12-06: hf:gemma2,
eight kernels, every variant captured and timed, none left out).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .runfiles import recorded_measurement

IN_MODEL = ("auto", "all")
# a kernel is a candidate to leave out where the model without it times at most this fraction
# below the model with every kernel; rotated rounds of 20 from idle vary by about 1% on the H200
MARGIN = 0.01


@dataclass
class InModelChoice:
    """What ``verify`` measured: the patched model with every selected kernel (``every_ms``),
    without each (``without_ms``, problem -> ms on ``every_ms``'s scale) and without those it
    leaves out together (``chosen_ms``; None when there were none to try); or, where the original
    model timed faster than the best of them, every kernel left out and ``chosen_ms`` the
    original's time (``original_faster``)."""

    device_name: str
    kernels: dict[str, str]  # problem -> digest of every kernel file the selection applied
    cuda_graphs: bool
    every_ms: float
    without_ms: dict[str, float] = field(default_factory=dict)
    chosen_ms: float | None = None
    left_out: list[str] = field(default_factory=list)
    original_faster: bool = False  # the original model timed faster than every variant: all left out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def why(self, name: str) -> str:
        if self.original_faster:
            return (f"left out: verify timed the original model faster than the patched one on this GPU "
                    f"({self.chosen_ms:.3f} ms against {self.every_ms:.3f} with every kernel): the model runs "
                    f"unchanged")
        return (f"left out: verify timed the model faster without it on this GPU ({self.without_ms[name]:.3f} ms "
                f"without it, {self.every_ms:.3f} with every kernel; {self.chosen_ms:.3f} without all it leaves out)")


def candidates(every_ms: float, without_ms: dict[str, float], margin: float = MARGIN) -> list[str]:
    """The problems whose kernel the model timed faster without, by more than ``margin``; the
    largest gain first."""
    faster = [name for name, ms in without_ms.items() if ms < every_ms * (1.0 - margin)]
    return sorted(faster, key=lambda name: without_ms[name])


def adopt(every_ms: float, chosen_ms: float, margin: float = MARGIN) -> bool:
    """Is the model without the candidates faster than with every kernel, by more than ``margin``?"""
    return chosen_ms < every_ms * (1.0 - margin)


def recorded_in_model(workdir: Path, device_name: str, digests: dict[str, str],
                      cuda_graphs: bool) -> InModelChoice | None:
    """The last ``verify``'s choice (its ``verify.json``), if it was made on this kind of device,
    with exactly these kernel files (``digests``: of every kernel the selection applies), in the
    same mode, and it timed a choice; None otherwise."""
    choice = recorded_measurement(workdir, "in_model_choice", InModelChoice, device_name, digests, cuda_graphs)
    return choice if choice is not None and choice.chosen_ms is not None else None
