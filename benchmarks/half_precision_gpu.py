"""What a GPU computes where the CPU judge now emulates half precision (harness/interpreter_half.py).

    PYTHONPATH=src python benchmarks/half_precision_gpu.py [--out DIR]

(a) The two kernels of red-team pass 14 that add in fp16 (the reduce starter summing fp16 chunks
    with tl.sum, the matmul starter with an fp16 dot accumulator; the edits of
    tests/test_interpreter_half.py), judged on the GPU at fp16 without timing: the CPU judge now
    refuses both; is the GPU's verdict the same?
(b) fp16 tl.sum of the reduce problem's ``large-cancelling`` rows on the GPU: how many rows
    come out inf or NaN, against the CPU emulation's tree (both should be most rows).
(c) bf16 arithmetic in a kernel (add, multiply-subtract, negate, select, fma, max, min, sum) on
    the GPU against torch's bf16 ops: the semantics the CPU emulation now follows.

Prints a markdown table last; writes DIR/half_precision.json when --out is given.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


@triton.jit
def _row_sum_fp16(x_ptr, out_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * N + tl.arange(0, N))
    tl.store(out_ptr + row, tl.sum(x, axis=0))


def judged_edits() -> list[dict]:
    from test_interpreter_half import FP16_ACCUMULATOR, FP16_ROW_SUM, KERNELS

    from autokernel.harness import Evaluator

    rows = []
    for kind, file, edits in (("reduce", "reduce.py", (FP16_ROW_SUM,)), ("matmul", "matmul.py", FP16_ACCUMULATOR)):
        text = (KERNELS / file).read_text()
        for line, edit in edits:
            text = text.replace(line, edit)
        text = text.replace("K <= 64", "True").replace("K > 64", "False")  # on every shape: a GPU's K is larger
        path = Path(f"/tmp/half_{file}")
        path.write_text(text)
        start = time.time()
        with Evaluator(kind, device="cuda", dtypes=["fp16"], timeout_s=300, timing=False, baselines=False) as ev:
            result = ev.evaluate(path)
        rows.append({"what": f"{kind} adding in fp16, GPU judge", "result": f"{result.verdict} "
                     f"({result.failed_stage or '-'}): {(result.message or '')[:150]}", "s": round(time.time() - start, 1)})
    return rows


def cancelling_rows() -> dict:
    from autokernel.harness.interpreter_half import as_fp16, tree_sum
    from autokernel.problems import get_problem

    n = 1024
    cases = dict(get_problem("reduce").adversarial_inputs({"M": 256, "N": n}, torch.float16, "cpu", 0))
    x = cases["large-cancelling"][0]
    out = torch.empty(x.shape[0], dtype=torch.float16, device="cuda")
    _row_sum_fp16[(x.shape[0],)](x.cuda(), out, n)
    gpu_bad = int((~torch.isfinite(out)).sum())
    cpu_bad = int((~np.isfinite(tree_sum(x.float().numpy(), 1, as_fp16))).sum())
    return {"what": "fp16 tl.sum of 256 large-cancelling rows (N 1024): rows not finite",
            "result": f"GPU {gpu_bad}/256, CPU emulation {cpu_bad}/256", "s": 0}


def bf16_semantics() -> dict:
    from bf16_probe import bf16_checks

    checks = bf16_checks("cuda")
    return {"what": "bf16 arithmetic in a kernel equals torch's bf16 ops",
            "result": ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in checks.items()), "s": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [cancelling_rows(), bf16_semantics(), *judged_edits()]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "half_precision.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}\n")
    print("| check | result | s |\n|---|---|---|")
    for row in rows:
        print(f"| {row['what']} | {row['result']} | {row['s']} |")


if __name__ == "__main__":
    main()
