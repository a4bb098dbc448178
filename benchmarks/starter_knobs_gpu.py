"""A starter's knob settings side by side on one GPU shape, with eager and torch.compile beside them.

    PYTHONPATH=src python benchmarks/starter_knobs_gpu.py --kind moe_experts_gptoss \\
        --configs '[{}, {"BLOCK_M": 128, "BLOCK_N": 64}]' --out DIR
    PYTHONPATH=src python benchmarks/starter_knobs_gpu.py --kind attention_softcap --configs-file F.json --out DIR
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/starter_knobs_gpu.py --kind softcap --cpu-smoke --out DIR

Each configuration is a dict set over the starter's ``KNOBS`` (``{}``: its default).  Every
setting is checked against the problem's reference at the shape (the largest error relative to
the largest reference value, fp32 reference on the same inputs) and timed with
``triton.testing.do_bench`` medians (``--rep-ms``), or with ``--device-time`` as GPU time alone (calls
captured in a CUDA graph and replayed: no host launch cost, which a model run in graph mode does
not pay either); a setting that fails to compile or to run is
recorded with its error and the sweep carries on.  Eager, torch.compile (``--compile-mode``) and,
for attention_softcap, FlexAttention are timed in the same process.  The fraction of the floor is
the larger of bytes / ``--bandwidth`` and flops / ``--peak`` over the time.  Writes
``knobs_<kind>_<shape>.json`` under ``--out`` and prints a markdown table last, fastest first.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def relative_error(out, ref) -> float:
    scale = float(ref.abs().max()) or 1.0
    return float((out.float() - ref.float()).abs().max()) / scale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", required=True)
    ap.add_argument("--configs", default="[{}]", help="JSON list of knob dicts set over the starter's KNOBS")
    ap.add_argument("--configs-file", type=Path, help="the same list in a file")
    ap.add_argument("--shape", type=int, default=0, help="index into the problem's GPU shapes")
    ap.add_argument("--shape-json", help='dimensions set over that shape, e.g. \'{"D": 256, "S": 1024}\'')
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"], help="on the GPU (the CPU smoke is fp32)")
    ap.add_argument("--rep-ms", type=float, default=100.0)
    ap.add_argument("--compile-mode", default="max-autotune-no-cudagraphs")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device-time", action="store_true", help="time GPU work alone (CUDA-graph replays)")
    ap.add_argument("--max-error", type=float, default=2e-2, help="largest relative error a setting may have")
    ap.add_argument("--bandwidth", type=float, default=4.2e12, help="bytes/s of the floor (H200 copy bandwidth)")
    ap.add_argument("--peak", type=float, default=730e12, help="flop/s of the floor (H200 cuBLAS bf16)")
    ap.add_argument("--cpu-smoke", action="store_true", help="the problem's first CPU shape, fp32, no timing worth reading")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import torch

    from autokernel.problems import get_problem
    from autokernel.problems.registry import load_starter

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from models_gpu import device_time_ms, flex_softcap, time_ms

    gpu = not args.cpu_smoke
    if gpu and not torch.cuda.is_available():
        print("no GPU: use --cpu-smoke to check the script", file=sys.stderr)
        return 2
    configs = json.loads(args.configs_file.read_text() if args.configs_file else args.configs)
    problem = get_problem(args.kind)
    shape = dict((problem.gpu_shapes if gpu else problem.cpu_shapes)[args.shape])
    shape.update(json.loads(args.shape_json) if args.shape_json else {})
    timed = (lambda fn: device_time_ms(fn)) if gpu and args.device_time else (lambda fn: time_ms(fn, gpu))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype] if gpu else torch.float32
    device = "cuda" if gpu else "cpu"
    inputs = problem.make_inputs(shape, dtype, device, 0)
    upcast = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in inputs]
    with torch.no_grad():
        ref = problem.reference(*upcast)
    floor_s = max(problem.bytes(shape, dtype) / args.bandwidth, problem.flops(shape) / args.peak)
    args.out.mkdir(parents=True, exist_ok=True)
    device_name = torch.cuda.get_device_name() if gpu else "cpu"
    print(f"{args.kind} at {shape} ({dtype}) on {device_name}; floor {floor_s * 1e3:.4f} ms", flush=True)

    rows = []
    with torch.no_grad():
        eager = problem.eager or problem.reference
        baselines = {"eager": eager}
        if gpu and not args.no_compile:
            baselines["torch.compile"] = torch.compile(eager, mode=args.compile_mode)
            if args.kind == "attention_softcap":
                flex = flex_softcap(*inputs)
                if flex is not None:
                    baselines["FlexAttention"] = lambda *a: flex()
        for name, fn in baselines.items():
            t0 = time.time()
            try:
                err = relative_error(fn(*inputs), ref)
                ms = timed(lambda: fn(*inputs))
                rows.append({"setting": name, "ms": ms, "error": err})
            except Exception as exc:  # noqa: BLE001 - a baseline this torch cannot run: its row says why
                rows.append({"setting": name, "failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"})
            print(f"  {name}: {rows[-1]} ({time.time() - t0:.1f} s)", flush=True)
        for knobs in configs:
            module = load_starter(args.kind, knobs)
            label = json.dumps(knobs, sort_keys=True) if knobs else "default"
            t0 = time.time()
            try:
                err = relative_error(module.kernel_fn(*inputs), ref)
                row = {"setting": label, "knobs": dict(module.KNOBS), "error": err}
                if err <= args.max_error:
                    row["ms"] = timed(lambda: module.kernel_fn(*inputs))
                else:
                    row["failed"] = f"relative error {err:.2e} > {args.max_error:g}"
            except Exception as exc:  # noqa: BLE001 - a setting that does not compile or run: recorded, the sweep goes on
                row = {"setting": label, "failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
                if gpu:
                    torch.cuda.synchronize()  # a launch failure poisons the context: let it raise here, not later
            rows.append(row)
            print(f"  {row} ({time.time() - t0:.1f} s)", flush=True)

    eager_ms = next((r["ms"] for r in rows if r["setting"] == "eager" and "ms" in r), None)
    compile_ms = next((r["ms"] for r in rows if r["setting"] == "torch.compile" and "ms" in r), None)
    result = {"kind": args.kind, "shape": shape, "dtype": str(dtype), "device": device_name,
              "timing": "device (CUDA graph)" if gpu and args.device_time else "do_bench",
              "torch": torch.__version__, "floor_ms": floor_s * 1e3, "rows": rows}
    tag = "_".join(f"{k}{v}" for k, v in sorted(shape.items()))
    (args.out / f"knobs_{args.kind}_{tag}.json").write_text(json.dumps(result, indent=2))
    print(f"\n{args.kind} at {shape}, {dtype}, {device_name}, {result['timing']}\n")
    print("| setting | ms | vs eager | vs torch.compile | of floor | rel. error |")
    print("|---|---:|---:|---:|---:|---:|")
    fastest = sorted((r for r in rows if "ms" in r), key=lambda r: r["ms"])
    for r in fastest + [r for r in rows if "ms" not in r]:
        if "ms" not in r:
            print(f"| {r['setting']} | failed: {r['failed']} | | | | |")
            continue
        vs = (lambda base: f"{base / r['ms']:.2f}x" if base else "-")
        print(f"| {r['setting']} | {r['ms']:.4f} | {vs(eager_ms)} | {vs(compile_ms)} | "
              f"{floor_s * 1e3 / r['ms']:.0%} | {r['error']:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
