"""Would packing linears that read the same input pay on an H200?  (issue 11: LLaMA patched >= 1.05x
torch.compile, where the GPU work measured at parity and cuBLAS GEMMs are 90% of it.)

    PYTHONPATH=src python benchmarks/packed_linears_gpu.py --out DIR [--compile]
    PYTHONPATH=src python benchmarks/packed_linears_gpu.py --out DIR --cpu-smoke   # CPU, tiny, checks the script

The LLaMA example's attention reads x three times (wq, wk, wv: N = 4096, 1024, 1024) and its MLP
twice (gate, up: N = 11008 each).  One GEMM on the concatenated weight does the same flops with
fewer launches and fewer partial waves of tiles; its outputs are column slices of one tensor.
Timed per group, bf16, at 4x1024 and 1x1024 tokens: the separate linears, the packed one, and
with ``--compile`` torch.compile (max-autotune-no-cudagraphs) of the separate ones (does inductor
pack them itself?).  GPU time alone (CUDA-graph replay, models_gpu.device_time_ms) and with the
host's launches (do_bench), each against the compute floor (flops / 730 TFLOP/s).  Writes
DIR/packed_linears.json and .md; prints the markdown table last.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PEAK_FLOPS = 730e12  # cuBLAS bf16 on the H200, measured (TARGETS.md)
BANDWIDTH = 4.2e12  # bytes/s, measured copy bandwidth
GROUPS = {"qkv": (4096, (4096, 1024, 1024)), "gate_up": (4096, (11008, 11008))}  # in features, out features
TOKENS = (4096, 1024)


def floors_ms(m: int, k: int, ns: tuple[int, ...], element: int = 2) -> tuple[float, float]:
    n = sum(ns)
    flops = 2.0 * m * n * k
    moved = element * (m * k + n * k + m * n)
    return flops / PEAK_FLOPS * 1e3, moved / BANDWIDTH * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--compile", action="store_true", help="also torch.compile of the separate linears")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU: the script runs")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch
    import torch.nn.functional as F

    from models_gpu import device_time_ms, time_ms

    gpu = torch.cuda.is_available() and not args.cpu_smoke
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    groups = GROUPS if gpu else {"qkv": (64, (64, 16, 16)), "gate_up": (64, (96, 96))}
    tokens = TOKENS if gpu else (32,)
    rows = []
    for name, (k, ns) in groups.items():
        weights = [torch.randn(n, k, device=device, dtype=dtype) / k ** 0.5 for n in ns]
        packed = torch.cat(weights)
        for m in tokens:
            x = torch.randn(m, k, device=device, dtype=dtype)
            separate = lambda: [F.linear(x, w) for w in weights]  # noqa: E731
            one = lambda: F.linear(x, packed).split(list(ns), dim=-1)  # noqa: E731
            want = separate()
            got = one()
            err = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(got, want))
            variants = [("separate", separate), ("packed", one)]
            if args.compile:
                torch._dynamo.reset()
                compiled = torch.compile(lambda x: [F.linear(x, w) for w in weights],
                                         mode="max-autotune-no-cudagraphs")
                t0 = time.monotonic()
                compiled(x)
                print(f"{name} m={m}: compile {time.monotonic() - t0:.0f} s", flush=True)
                variants.append(("torch.compile(separate)", lambda: compiled(x)))
            compute, memory = floors_ms(m, k, ns)
            for label, fn in variants:
                alone = device_time_ms(fn) if gpu else time_ms(fn, False)
                launched = time_ms(fn, gpu)
                row = {"group": name, "tokens": m, "in": k, "out": list(ns), "variant": label,
                       "gpu_alone_ms": round(alone, 4), "with_launches_ms": round(launched, 4),
                       "compute_floor_ms": round(compute, 4), "memory_floor_ms": round(memory, 4),
                       "floor_fraction": round(max(compute, memory) / alone, 3) if alone > 0 else None,
                       "max_rel_error_packed": err}
                rows.append(row)
                print(json.dumps(row), flush=True)

    info = {"device": torch.cuda.get_device_name() if gpu else "cpu", "torch": torch.__version__, "rows": rows}
    (out / "packed_linears.json").write_text(json.dumps(info, indent=1))
    lines = [f"device: {info['device']}, torch {info['torch']}, {dtype}", "",
             "| group | tokens | out features | variant | GPU alone ms | with launches ms | floor ms | of floor | vs separate |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        base = next(b for b in rows if b["group"] == r["group"] and b["tokens"] == r["tokens"] and b["variant"] == "separate")
        ratio = base["gpu_alone_ms"] / r["gpu_alone_ms"] if r["gpu_alone_ms"] else float("nan")
        lines.append(f"| {r['group']} | {r['tokens']} | {'+'.join(map(str, r['out']))} | {r['variant']} | "
                     f"{r['gpu_alone_ms']:.4f} | {r['with_launches_ms']:.4f} | {max(r['compute_floor_ms'], r['memory_floor_ms']):.4f} | "
                     f"{100 * (r['floor_fraction'] or 0):.0f}% | {ratio:.3f}x |")
    table = "\n".join(lines)
    (out / "packed_linears.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
