"""Every starter on many input seeds at its edge shapes and numerics cases, in this process.

The judge draws fresh seeds for every evaluation, so a starter whose precision fails on one
draw in a few hundred fails CI now and then (the GELU starters did: 1 + tanh(z) lost the left
tail's relative precision near x = -3.5).  This finds such kernels before CI does: each kind's
edge shapes and its numerics cases at every CPU and edge shape (every dtype: what the judge's
edges and numerics stages run, and the numerics draws among timed calls), drawn from many seeds,
compared with the float64 reference by the judge's own comparison.

    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/starter_seeds.py --seconds 60
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/starter_seeds.py --kinds gelu,geglu --seeds 200

Prints one line per kind and a markdown table last; exit 1 when any case failed.
"""
from __future__ import annotations

import argparse
import random
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="", help="comma-separated kinds (default: every built-in kind)")
    ap.add_argument("--seeds", type=int, default=40, help="draws per case")
    ap.add_argument("--seconds", type=float, default=60.0, help="at most this long per kind")
    ap.add_argument("--seed", type=int, default=0, help="seeds the seeds")
    args = ap.parse_args()

    import os

    import torch

    from autokernel.harness import compare, interpreter_as_gpu, stages

    if os.environ.get("TRITON_INTERPRET") == "1":
        interpreter_as_gpu.install()  # what the judge's worker runs kernels on: a GPU's casts and dots
    from autokernel.problems import get_problem
    from autokernel.problems.registry import list_kinds, load_starter

    kinds = [k for k in args.kinds.split(",") if k] or list_kinds()
    unknown = sorted(set(kinds) - set(list_kinds()))
    if unknown:
        print(f"unknown kind(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    rows = []
    for kind in kinds:
        problem = get_problem(kind)
        module = load_starter(kind)
        rng = random.Random(args.seed)
        started, cases, failures = time.monotonic(), 0, []
        for _ in range(args.seeds):
            for dtype in problem.dtypes:
                drawn = [(s, problem.make_inputs(dict(s), dtype, "cpu", rng.getrandbits(31)))
                         for s in problem.edge_shapes_for("cpu")]
                if problem.adversarial_inputs is not None:
                    drawn += [(s, a) for s in (*problem.cpu_shapes, *problem.edge_shapes_for("cpu"))
                              for _, a in problem.adversarial_inputs(dict(s), dtype, "cpu", rng.getrandbits(31))]
                for shape, inputs in drawn:
                    inputs = tuple(inputs)
                    want = problem.reference(*stages.upcast(inputs, torch.float64))
                    meta = compare.output_meta(problem.reference(*stages.upcast(inputs, dtype)))
                    verdict = compare.compare_outputs(compare.as_tuple(module.kernel_fn(*inputs)), want, meta,
                                                      problem.tolerance(dtype))
                    cases += 1
                    if not verdict.ok:
                        failures.append(f"{stages.format_shape(shape)} {stages.dtype_name(dtype)}: {verdict.message}")
            if time.monotonic() - started > args.seconds:
                break
        rows.append((kind, cases, failures))
        print(f"{kind}: {cases} cases, {len(failures)} failed" + (f" (first: {failures[0]})" if failures else ""),
              flush=True)
    print("\n| kind | cases | failed | first failure |\n|---|---:|---:|---|")
    for kind, cases, failures in rows:
        print(f"| {kind} | {cases} | {len(failures)} | {failures[0] if failures else '-'} |")
    return 1 if any(failures for _, _, failures in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
