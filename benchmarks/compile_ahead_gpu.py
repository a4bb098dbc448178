"""Does compiling ahead pay?  First evaluations of new kernel files, with and without helpers.

    PYTHONPATH=src python benchmarks/compile_ahead_gpu.py --out DIR [--kinds softmax,rmsnorm] [--files 3] [--helpers 3]
    PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/compile_ahead_gpu.py --out DIR --cpu-smoke

The loop judges a new kernel file every experiment, and Triton compiles it once per
specialisation the stages reach (harness/compile_ahead.py).  For each kind, ``--files`` copies
of its starter, each made new to Triton's cache by a comment in every jitted function's body
(the cache key hashes the function's source), are judged alternately without and with
``--helpers`` helper workers, all stages and timing, baselines cached by a first evaluation.
Writes DIR/compile_ahead.json; prints a markdown table last (median wall time of a first
evaluation, its stages, and how many calls the helpers finished).
"""
from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import uuid
from pathlib import Path

import torch

from autokernel.harness import Evaluator
from autokernel.problems.registry import KERNELS_DIR


def made_new(source: str, tag: str) -> str:
    """``source`` with a comment naming ``tag`` as the first line of every ``@triton.jit``
    function's body: new to Triton's cache, the same kernel."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    at = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            first = node.body[0]
            at.append((first.lineno - 1, " " * first.col_offset))
    for lineno, indent in sorted(at, reverse=True):
        lines.insert(lineno, f"{indent}# compile-ahead benchmark {tag}\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--kinds", default="softmax,rmsnorm")
    ap.add_argument("--files", type=int, default=3, help="new files per kind and setting")
    ap.add_argument("--helpers", type=int, default=3)
    ap.add_argument("--cpu-smoke", action="store_true", help="the script itself on the CPU (nothing compiles there)")
    args = ap.parse_args(argv)
    gpu = not args.cpu_smoke
    if gpu and not torch.cuda.is_available():
        print("no GPU: run with --cpu-smoke to check the script", file=sys.stderr)
        return 2
    device = "cuda" if gpu else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    for kind in args.kinds.split(","):
        starter = (KERNELS_DIR / f"{kind}.py").read_text()
        options = {} if gpu else {"dtypes": ["fp32"]}  # the CPU smoke: one dtype is enough
        rows = results.setdefault(kind, [])
        for n in range(args.files * 2 + 1):
            helpers = 0 if n == 0 or n % 2 == 1 else args.helpers  # the first fills the baseline cache
            path = args.out / f"{kind}_{n}.py"
            path.write_text(made_new(starter, uuid.uuid4().hex))
            with Evaluator(kind, device=device, compile_ahead=helpers, **options) as ev:
                result = ev.evaluate(path)
                rows.append({"file": path.name, "helpers": helpers, "verdict": result.verdict, "wall_s": result.wall_s,
                             "phases": result.phases, "helper_calls": ev.last_ahead_calls, "first": n == 0})
            print(f"{kind} {path.name} helpers={helpers}: {result.verdict} {result.wall_s:.2f} s {result.phases} "
                  f"helper calls {rows[-1]['helper_calls']}", flush=True)
    (args.out / "compile_ahead.json").write_text(json.dumps(results, indent=2) + "\n")
    print("\n| kind | helpers | new files | first evaluation s (median) | stages s (median) | helper calls (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, rows in results.items():
        for helpers in (0, args.helpers):
            picked = [r for r in rows if r["helpers"] == helpers and not r["first"]]
            if not picked:
                continue
            wall = statistics.median(r["wall_s"] for r in picked)
            stages = statistics.median(r["phases"].get("stages", 0.0) for r in picked)
            calls = statistics.median(r["helper_calls"] for r in picked)
            print(f"| {kind} | {helpers} | {len(picked)} | {wall:.2f} | {stages:.2f} | {calls:g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
