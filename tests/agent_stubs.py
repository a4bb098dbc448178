"""Stand-ins shared by the agent tests: a small problem, a kernel file, a Context."""
from __future__ import annotations

from pathlib import Path

import torch

from autokernel.agents.base import Context
from autokernel.harness.records import Evaluation, ShapeTiming
from autokernel.problems.base import Problem

KERNEL = '''"""Row sums (stand-in kernel for the agent tests)."""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_N": 256, "num_warps": 4}
KNOB_SPACE = {"BLOCK_N": [128, 256, 512], "num_warps": [2, 4, 8]}


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    _row_sum[(M,)](x, out, N, x.stride(0), BLOCK_N=KNOBS["BLOCK_N"], num_warps=KNOBS["num_warps"])
    return out
'''

SIGNATURE = "kernel_fn(x[M,N]) -> out[M]  # row sums"


def make_problem(kind: str = "rowsum") -> Problem:
    return Problem(
        kind=kind,
        description="Row sums of a matrix, fp32 accumulation.",
        signature=SIGNATURE,
        dims=("M", "N"),
        reference=lambda x: x.sum(-1),
        make_inputs=lambda shape, dtype, device, seed: (torch.randn(shape["M"], shape["N"], dtype=dtype, device=device),),
        flops=lambda s: float(s["M"] * s["N"]),
        bytes=lambda s, dtype: float(s["M"] * s["N"] * 2 + s["M"] * 2),
        gpu_shapes=({"M": 8192, "N": 8192},),
        cpu_shapes=({"M": 16, "N": 300},),
        dtypes=(torch.bfloat16, torch.float32),
    )


def evaluation(pct: float | None, latency_us: float = 100.0, interpreter: bool = False) -> Evaluation:
    floor = latency_us * pct / 100 if pct is not None else None
    timing = ShapeTiming(shape={"M": 8192, "N": 8192}, dtype="bf16", latency_us=latency_us, spread_us=1.0,
                         floor_us=floor, pct_roofline=pct, eager_us=2 * latency_us, speedup_vs_eager=2.0)
    return Evaluation(problem="rowsum", kernel_file="kernel.py", correct=True, verdict="pass",
                      device="cuda", timing_kind="interpreter" if interpreter else "gpu",
                      timings=[timing], score_us=latency_us, eager_score_us=2 * latency_us)


def row(n: int, status: str, description: str = "an idea", stage: str = "") -> dict[str, str]:
    return {"experiment": str(n), "problem": "rowsum", "agent": "llm", "status": status, "failed_stage": stage,
            "latency_us": "" if stage else "100", "pct_roofline": "", "speedup_vs_start": "1.0", "tokens": "0",
            "description": description}


def make_context(problem_dir: Path, *, kind: str = "rowsum", source: str = KERNEL, best=None, history=None,
                 last_failure=None, experiment: int = 1, device: str = "cuda", extra=None) -> Context:
    problem_dir.mkdir(parents=True, exist_ok=True)
    kernel = problem_dir / "kernel.py"
    if not kernel.exists():
        kernel.write_text(source)
    return Context(problem=make_problem(kind), problem_spec=kind, problem_dir=problem_dir, kernel_path=kernel,
                   best_source=source, best=best, start=best, history=list(history or []),
                   last_failure=last_failure, experiment=experiment, device=device,
                   extra=dict(extra or {}))
