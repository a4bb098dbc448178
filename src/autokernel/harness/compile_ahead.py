"""Compile ahead (GPU, opt-in): helper workers call a new kernel file once at each shape and
dtype the later stages will reach, while the candidate's own worker works through the first
stages, so that Triton's compiles of those specialisations run side by side and the worker
finds them in Triton's cache when it gets there.

Why: Triton compiles a kernel once per specialisation (the constexprs a launch computes from
the shape, integer arguments divisible by 16 or equal to 1, the dtypes), in the process that
launches it, one compile at a time.  A new kernel file meets the target shapes, the edge
shapes and the held-out shapes of every dtype: on the H200 a first evaluation's stages took
6.1 s (rmsnorm) and 23.4 s (softmax) against 1.7 and 2.0 s warm (BENCHMARKS.md, seventh
session), and the loop judges a new file every time.

What it does not change: the helpers are workers like the candidate's own (the same rules, the
same watch); their answers are thrown away and never reach a verdict; they are killed before
the timed calls begin (they would share the GPU with them) and whenever the evaluation ends.
The stages run exactly as without them.  Not for problems whose files build native code
(KernelBench with ``--allow-torch``): those builds share one build folder.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..problems.base import Problem, Shape

ENV = "AUTOKERNEL_COMPILE_AHEAD"  # helper workers per evaluation on a GPU; unset or 0: none
HELPER_TIMEOUT_S = 600.0  # one call at a new shape: a compile, which can be slow on a busy host
HELPER_OVERHEAD = 1 << 30  # a helper beyond its case: CUDA context, the L2 flush buffer, the allocator's slack


def helpers_asked() -> int:
    """The helpers ``AUTOKERNEL_COMPILE_AHEAD`` asks for.  Anything but a whole number >= 0 is the
    user's mistake: a ValueError (the CLI checks it before any command runs, as a usage error)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return 0
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"{ENV} must be a whole number of helper workers (0 for none), not {value!r}") from None
    if count < 0:
        raise ValueError(f"{ENV} must be 0 or more, not {count}")
    return count


def helpers_that_fit(requested: int, plan: Any) -> int:
    """How many of ``requested`` helpers fit beside the evaluation's memory ``plan`` (memory.py):
    each holds one case's inputs and outputs and its own overhead, in what the plan leaves of
    its budget.  The plan measured the budget before any helper started; one that took that
    memory would leave the judge's own cases short."""
    if requested <= 0 or plan is None:
        return 0
    each = plan.sizes.inputs + plan.sizes.outputs + HELPER_OVERHEAD
    return int(min(requested, max(plan.budget - plan.need, 0) // each))


def cases_ahead(problem: Problem, plan: Any, device: str) -> list[tuple[Shape, torch.dtype]]:
    """The (shape, dtype) pairs the stages of ``plan`` (a ``stages.StagePlan``) call the kernel
    at, each once, from the last stage back to the first: the candidate's worker compiles from
    the first, the helpers from the other end."""
    heldout, _ = plan.heldout_draw(problem)
    order = [(dict(s), d) for d in plan.dtypes for s in plan.shapes]
    order += [(dict(s), d) for d in plan.dtypes for s in problem.edge_shapes_for(device, plan.shapes)]
    order += [(dict(s), d) for d in plan.dtypes for s in heldout]
    seen, unique = set(), []
    for shape, dtype in order:
        key = (tuple(shape.items()), dtype)
        if key not in seen:
            seen.add(key)
            unique.append((shape, dtype))
    return unique[::-1]


def split(cases: list, helpers: int) -> list[list]:
    """Round-robin: each helper starts near the end of the stages' order."""
    return [cases[i::helpers] for i in range(helpers) if cases[i::helpers]]


@dataclass
class CompileAhead:
    """The helpers of one evaluation (``start``), stopped with ``stop``."""

    workers: list[Any] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    calls: list[int] = field(default_factory=list)  # calls each helper finished (tests and benchmarks read it)

    def stop(self) -> None:
        """Kill the helpers now (a compile in flight ends with its process) and wait for their
        threads."""
        self.stopping.set()
        for worker in self.workers:
            worker.kill()
        for thread in self.threads:
            thread.join(timeout=10.0)


def start(make_worker: Callable[[], Any], load_message: dict[str, Any], cases: list[tuple[Shape, torch.dtype]],
          helpers: int, seed: int) -> CompileAhead:
    """Launch ``helpers`` fresh workers from ``make_worker`` here (a launch sets the environment
    the process starts with: not from several threads at once), then a thread for each that waits
    for its worker, loads the file with ``load_message`` and calls it once per case of its share."""
    ahead = CompileAhead()
    for index, share in enumerate(split(cases, max(int(helpers), 0))):
        worker = make_worker()
        worker.launch()
        ahead.workers.append(worker)
        ahead.calls.append(0)
        thread = threading.Thread(target=_helper, args=(ahead, index, worker, load_message, share, seed + index),
                                  name=f"autokernel-compile-ahead-{index}", daemon=True)
        ahead.threads.append(thread)
        thread.start()
    return ahead


def _helper(ahead: CompileAhead, index: int, worker: Any, load_message: dict[str, Any],
            share: list[tuple[Shape, torch.dtype]], seed: int) -> None:
    try:
        worker.wait_ready()
        if ahead.stopping.is_set():
            return
        reply = worker.request(dict(load_message), HELPER_TIMEOUT_S)
        if "error" in reply or reply.get("findings") or reply.get("tampered"):
            return  # the candidate's own worker finds the same and says so
        for n, (shape, dtype) in enumerate(share):
            if ahead.stopping.is_set():
                return
            worker.request({"op": "call", "slot": "candidate", "shape": dict(shape), "dtype": dtype, "sets": None,
                            "draw": [seed + n], "poison": None, "expected": None, "require_launch": True,
                            "buffers": None}, HELPER_TIMEOUT_S)
            ahead.calls[index] += 1
    except Exception:  # noqa: BLE001 - a helper that failed (or was killed) leaves its compiles to the worker
        return
    finally:
        worker.kill()
