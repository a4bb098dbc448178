"""A judge for the parallel-loop tests that reads a kernel file's COST instead of running it.
Picklable and light (no torch), so lane processes and Ray actors start fast."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from autokernel.harness.records import Comparison, Evaluation, ShapeTiming

EVAL_DELAY_ENV = "AUTOKERNEL_TEST_EVAL_S"


def kernel(cost: float, marker: str = "") -> str:
    return (f'"""A stand-in kernel: the tests\' judge reads COST instead of running it.{marker}"""\n'
            f"COST = {cost}\n\n\ndef kernel_fn(x):\n    return x.sum(dim=-1)\n")


def cost_of(source: str) -> float:
    return float(re.search(r"^COST = ([0-9.]+)$", source, re.M).group(1))


class CostEvaluator:
    """Judges a stand-in kernel by its COST after sleeping ``AUTOKERNEL_TEST_EVAL_S`` seconds.
    A file saying CRASH crashes; one saying DIE kills the process that judges it."""

    def __init__(self, spec, **kwargs):
        self.spec = spec
        self.delay = float(os.environ.get(EVAL_DELAY_ENV, "0") or 0)

    def evaluate(self, kernel_file, incumbent_file=None):
        time.sleep(self.delay)
        source = Path(kernel_file).read_text()
        if "DIE" in source:
            os._exit(9)
        if "CRASH" in source:
            return Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=False, verdict="crash",
                              message="worker died (signal 11)")
        us = cost_of(source)
        timing = ShapeTiming(shape={"M": 4, "N": 8}, dtype="fp32", latency_us=us, spread_us=0.1)
        ev = Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=True, verdict="pass",
                        timing_kind="interpreter", timings=[timing], score_us=us)
        if incumbent_file is not None:
            inc = cost_of(Path(incumbent_file).read_text())
            ev.vs_incumbent = Comparison(candidate_us=us, incumbent_us=inc, noise_frac=0.02,
                                         significant=abs(us - inc) > 0.02 * inc)
        return ev

    def close(self):
        pass




class EnvEvaluator:
    """Says which GPUs its process may see (``CUDA_VISIBLE_DEVICES``) in the Evaluation's message."""

    def __init__(self, spec, **kwargs):
        self.spec = spec

    def evaluate(self, kernel_file, incumbent_file=None):
        time.sleep(0.2)
        return Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=False, verdict="crash",
                          message=f"pid {os.getpid()} sees {os.environ.get('CUDA_VISIBLE_DEVICES', 'all')}")

    def close(self):
        pass
