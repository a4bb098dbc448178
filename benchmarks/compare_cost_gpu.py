"""What the judge pays to compare one output with its reference: the fused Triton pass against the
PyTorch path (and the implementation before the rewrite), and whether they agree.

    PYTHONPATH=src python benchmarks/compare_cost_gpu.py --out DIR [--shapes 4096x50257:bf16,...]
    PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/compare_cost_gpu.py --out DIR --cpu-smoke

For each shape: a softmax-like float32 reference and the output in the given dtype (its own
rounding of the reference), compared by ``legacy`` (tests/compare_legacy.py, the code before the
rewrite), ``torch`` (``compare.torch_findings``, today's CPU path) and ``fused``
(``compare.compare_tensor``, which takes ``compare_kernel`` on a GPU), each at the judge's slice
size.  Wall time per comparison (median of --repeats after one warm-up; the first fused call,
compile or cache load included, is reported apart).  Then the verdicts of the three paths on
the honest output and on four broken ones (one element off, a row of zeros, a NaN, a small
bias): same pass/fail, same kind of message, same worst element.  Writes DIR/compare_cost.json
and DIR/compare_cost.md; prints a markdown table last.  Expected GPU wall time: under a minute.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
GPU_SHAPES = "4096x50257:bf16,4096x4096:fp16,65536x64:fp32"
CPU_SHAPES = "6x300:bf16,40x3:fp32"
BROKEN = ("honest", "one element", "zero row", "nan", "bias")


def parse_shapes(text: str) -> list[tuple[int, int, str]]:
    shapes = []
    for item in text.split(","):
        dims, _, dtype = item.strip().partition(":")
        rows, _, width = dims.partition("x")
        if not (rows.isdigit() and width.isdigit() and dtype in DTYPES):
            raise ValueError(f"bad shape {item!r}: want ROWSxWIDTH:{'|'.join(DTYPES)}")
        shapes.append((int(rows), int(width), dtype))
    return shapes


def variants(out, ref):
    """The honest output and four broken ones (each a fresh tensor)."""
    import torch

    one = out.clone()
    one[out.shape[0] // 2, out.shape[1] // 3] += 0.5
    zero_row = out.clone()
    zero_row[-1] = 0
    nan = out.clone()
    nan[0, -1] = float("nan")
    bias = (ref * 1.03).to(out.dtype)
    return dict(zip(BROKEN, (out, one, zero_row, nan, bias)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default=None, help=f"ROWSxWIDTH:DTYPE,... (default {GPU_SHAPES})")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=240.0, help="stop timing further shapes past this")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU, the kernel interpreted")
    args = ap.parse_args(argv)
    try:
        shapes = parse_shapes(args.shapes or (CPU_SHAPES if args.cpu_smoke else GPU_SHAPES))
    except ValueError as exc:
        print(f"compare_cost_gpu.py: {exc}", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print("compare_cost_gpu.py: --repeats must be at least 1", file=sys.stderr)
        return 2
    import os

    import torch

    gpu = not args.cpu_smoke
    if gpu and not torch.cuda.is_available():
        print("compare_cost_gpu.py: no GPU here (use --cpu-smoke)", file=sys.stderr)
        return 2
    if not gpu and os.environ.get("TRITON_INTERPRET") != "1":
        print("compare_cost_gpu.py: --cpu-smoke needs TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    import compare_legacy

    from autokernel.harness import compare, compare_kernel, memory
    from autokernel.problems.base import DEFAULT_TOLERANCES

    device = "cuda" if gpu else "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    chunk = memory.COMPARE_CHUNK_ELEMENTS

    def fused(out, ref, tol):
        if gpu:
            return compare.compare_tensor(out, ref, tol, chunk)  # the judge's own dispatch
        assert compare_kernel.applies(out, ref, tol)
        found = compare_kernel.findings(compare._rows(out), compare._rows(ref), tol, ref.dim() > 0)
        return compare.verdict_of(found, tol, ref)

    paths = {"legacy": lambda o, r, t: compare_legacy.compare_tensor(o, r, t, chunk),
             "torch": lambda o, r, t: compare.verdict_of(compare.torch_findings(o, r, t, chunk), t, r),
             "fused": fused}
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = []
    for rows, width, dtype_name in shapes:
        if time.perf_counter() - started > args.max_seconds:
            print(f"{rows}x{width}: skipped (--max-seconds)", flush=True)
            continue
        dtype = getattr(torch, DTYPES[dtype_name])
        tol = DEFAULT_TOLERANCES[dtype]
        gen = torch.Generator(device=device).manual_seed(rows * 31 + width)
        ref = torch.softmax(torch.randn(rows, width, device=device, generator=gen) * 2, -1)
        out = ref.to(dtype)
        row = {"shape": f"{rows}x{width}", "dtype": dtype_name, "elements": rows * width}
        for name, fn in paths.items():
            sync()
            t0 = time.perf_counter()
            fn(out, ref, tol)
            sync()
            row[f"{name}_first_ms"] = (time.perf_counter() - t0) * 1e3
            times = []
            for _ in range(args.repeats):
                sync()
                t0 = time.perf_counter()
                fn(out, ref, tol)
                sync()
                times.append((time.perf_counter() - t0) * 1e3)
            row[f"{name}_ms"] = statistics.median(times)
        agree = []
        for label, candidate in variants(out, ref).items():
            verdicts = {name: fn(candidate, ref, tol) for name, fn in paths.items()}
            kinds = {name: (v.ok, v.nonfinite, v.message.split(" ")[0] + " " + v.message.split(" ")[1] if v.message else "")
                     for name, v in verdicts.items()}
            exact = verdicts["fused"].message == verdicts["torch"].message
            same = len(set(kinds.values())) == 1
            agree.append({"case": label, "same_kind": same, "same_message": exact,
                          **{name: {"ok": v.ok, "worst": v.worst_error, "message": v.message} for name, v in verdicts.items()}})
        row["agree"] = agree
        row["all_agree"] = all(a["same_kind"] for a in agree)
        results.append(row)
        print(f"{row['shape']} {dtype_name}: legacy {row['legacy_ms']:.1f} ms, torch {row['torch_ms']:.1f} ms, "
              f"fused {row['fused_ms']:.2f} ms (first {row['fused_first_ms']:.0f} ms); verdicts agree: "
              f"{row['all_agree']}", flush=True)
        del ref, out
        if gpu:
            torch.cuda.empty_cache()
    (args.out / "compare_cost.json").write_text(json.dumps({"device": torch.cuda.get_device_name() if gpu else "cpu",
                                                            "chunk": chunk, "results": results}, indent=1))
    table = ["| shape | out dtype | legacy ms | torch ms | fused ms | fused first call ms | legacy / fused | verdicts agree | messages equal |",
             "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in results:
        table.append(f"| {r['shape']} | {r['dtype']} | {r['legacy_ms']:.2f} | {r['torch_ms']:.2f} | {r['fused_ms']:.3f} | "
                     f"{r['fused_first_ms']:.0f} | {r['legacy_ms'] / max(r['fused_ms'], 1e-9):.1f}x | "
                     f"{'yes' if r['all_agree'] else 'NO'} | "
                     f"{sum(a['same_message'] for a in r['agree'])}/{len(r['agree'])} |")
    text = "\n".join(table)
    (args.out / "compare_cost.md").write_text(text + "\n")
    print(text)
    return 0 if all(r["all_agree"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
