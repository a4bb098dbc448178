"""A kernel whose run time is a known function of its knobs, for tuner tests.

The kernel doubles a vector with a real (tiny) Triton kernel and sleeps ``DELAY_MS[A, B, C]``
first, so the judge's timings follow a landscape we choose:

* a bowl around a *local* optimum next to the starting configuration (each knob one step
  away from it costs ``step_ms`` more);
* one *global* optimum far faster than anything else, at a configuration that differs from
  the local optimum in two knobs at once, with nothing on the way to it faster than the bowl.

Coordinate descent from the start walks into the local optimum and stays; finding the global
one takes moving two knobs together (or sweeping).  ``LANDSCAPES`` holds the one the tests
tune against and a held-out one of the same kind.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

VALUES = {"A": [0, 1, 2, 3, 4], "B": [0, 1, 2, 3, 4], "C": [0, 1, 2]}

PROBLEM = '''"""Double a vector (the tuner landscape tests' problem)."""
import torch

DIMS = ("N",)
SHAPES = ["256"]
CPU_SHAPES = ["64"]
EDGE_SHAPES = ["1", "37"]
DTYPES = ["fp32"]


def reference(x):
    return x * 2


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return (torch.randn(shape["N"], generator=g, device=device, dtype=torch.float32).to(dtype),)
'''

KERNEL = '''"""Doubles x; sleeps as long as the landscape says for the configuration."""
import time

import torch
import triton
import triton.language as tl

KNOBS = {"A": %(A)d, "B": %(B)d, "C": %(C)d}
KNOB_SPACE = %(space)r
DELAY_MS = %(delays)r


@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def kernel_fn(x):
    time.sleep(DELAY_MS[(KNOBS["A"], KNOBS["B"], KNOBS["C"])] / 1000.0)
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        _double[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)
    return out
'''


@dataclass(frozen=True)
class Landscape:
    name: str
    start: tuple[int, int, int]  # the starting kernel's (A, B, C)
    local: tuple[int, int, int]  # bottom of the bowl, one step from the start
    best: tuple[int, int, int]  # the global optimum: two knobs away from ``local``
    # Large against the interpreter's own time per call (10-30 ms on a busy machine) and its noise.
    base_ms: float = 40.0  # at the local optimum
    step_ms: float = 10.0  # per knob step away from it
    best_ms: float = 8.0

    def delay_ms(self, config: tuple[int, int, int]) -> float:
        if config == self.best:
            return self.best_ms
        return self.base_ms + self.step_ms * sum(abs(a - b) for a, b in zip(config, self.local))

    def delays(self) -> dict[tuple[int, int, int], float]:
        return {c: self.delay_ms(c) for c in itertools.product(*VALUES.values())}

    def kernel_source(self) -> str:
        a, b, c = self.start
        return KERNEL % {"A": a, "B": b, "C": c, "space": VALUES, "delays": self.delays()}

    def write(self, directory: Path) -> tuple[Path, Path]:
        """The problem file and the starting kernel file, in ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        problem, kernel = directory / f"double_{self.name}.py", directory / f"kernel_{self.name}.py"
        problem.write_text(PROBLEM)
        kernel.write_text(self.kernel_source())
        return problem, kernel


LANDSCAPES = {
    "tuned": Landscape("tuned", start=(1, 1, 0), local=(1, 2, 0), best=(4, 4, 0)),
    "held_out": Landscape("held_out", start=(4, 1, 1), local=(4, 2, 1), best=(1, 2, 2)),
}


def check_landscape(land: Landscape) -> None:
    """The landscape is of the promised kind (tests call this on every one they use)."""
    delays = land.delays()
    assert min(delays, key=delays.get) == land.best
    assert sum(1 for x, y in zip(land.local, land.best) if x != y) == 2
    assert sum(1 for x, y in zip(land.start, land.local) if x != y) == 1
    for knob in range(3):  # the local optimum is one: every single-knob move from it is slower
        for v in VALUES["ABC"[knob]]:
            moved = list(land.local)
            moved[knob] = v
            if tuple(moved) != land.local:
                assert delays[tuple(moved)] > delays[land.local]
