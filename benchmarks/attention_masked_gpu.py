"""attention_masked on a GPU: the starter over its whole KNOB_SPACE at the problem's GPU shapes,
against SDPA with the same mask (eager's choice of backend) and, for the all-visible masks, our
unmasked attention starter.  Prints the best configuration and a markdown table last.

    PYTHONPATH=src python benchmarks/attention_masked_gpu.py --out DIR       # ~3 min on an H200
    PYTHONPATH=src python benchmarks/attention_masked_gpu.py --out DIR --cpu-smoke
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from autokernel.kernels import attention as plain
from autokernel.kernels import attention_masked as masked
from autokernel.problems import get_problem


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-wall", type=float, default=300.0)
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.cpu_smoke else "cuda"
    problem = get_problem("attention_masked")
    shapes = problem.shapes_for(device)[:2] if args.cpu_smoke else problem.shapes_for(device)
    dtype = torch.float32 if args.cpu_smoke else torch.bfloat16
    if args.cpu_smoke:
        def bench(fn):
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
    else:
        import triton.testing

        def bench(fn):
            return triton.testing.do_bench(fn, warmup=5, rep=20)
    space = masked.KNOB_SPACE
    configs = [dict(zip(space, values)) for values in itertools.product(*space.values())]
    configs.sort(key=lambda c: c != masked.KNOBS)  # the default first: timed whatever the wall budget
    if args.cpu_smoke:
        configs = configs[:2]
    started = time.perf_counter()
    sets = []
    for shape in shapes:
        q, k, v, mask, scale = problem.make_inputs(dict(shape), dtype, device, 0)[:5]
        if mask.dtype == torch.bool:
            mask = torch.ones_like(mask)  # what a capture builds for an unpadded batch
        sets.append((shape, (q, k, v, mask, scale)))
    rows = []
    for shape, (q, k, v, mask, scale) in sets:
        gqa = k.shape[1] != q.shape[1]
        sdpa = bench(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa))
        unmasked = None
        if mask.dtype == torch.bool and bool(mask.all()):
            unmasked = bench(lambda: plain.kernel_fn(q, k, v, False, scale))
        rows.append({"shape": dict(shape), "sdpa_ms": sdpa, "unmasked_starter_ms": unmasked, "configs": {}})
    for cfg in configs:
        if time.perf_counter() - started > args.max_wall:
            break
        for row, (shape, (q, k, v, mask, scale)) in zip(rows, sets):
            try:
                out = masked.attention_masked(q, k, v, mask, scale=scale, knobs=cfg)
                wide_mask = mask if mask.dtype == torch.bool else mask.float()
                ok = bool(torch.allclose(out.float(), F.scaled_dot_product_attention(
                    q.float(), k.float(), v.float(), attn_mask=wide_mask, scale=scale,
                    enable_gqa=k.shape[1] != q.shape[1]).nan_to_num(), atol=3e-2, rtol=3e-2))
                t = bench(lambda: masked.attention_masked(q, k, v, mask, scale=scale, knobs=cfg)) if ok else None
            except Exception as exc:  # a configuration that does not compile is recorded, not fatal
                t = None
                print(f"  {cfg}: {type(exc).__name__}", file=sys.stderr)
            row["configs"][json.dumps(cfg, sort_keys=True)] = t
    totals = {}
    for key in rows[0]["configs"]:
        times = [r["configs"].get(key) for r in rows]
        if all(t is not None for t in times):
            totals[key] = sum(times)
    best = min(totals, key=totals.get) if totals else None
    default = json.dumps(masked.KNOBS, sort_keys=True)
    (args.out / "attention_masked.json").write_text(json.dumps({"rows": rows, "totals": totals, "best": best}, indent=1))
    print(f"configurations timed: {len(totals)}; best {best} ({totals.get(best, float('nan')):.4f} ms, all shapes); "
          f"default {default} ({totals.get(default, float('nan')):.4f} ms)")
    print("\n| shape | SDPA with mask ms | unmasked starter ms | default ms | best ms |\n|---|---:|---:|---:|---:|")
    for r in rows:
        fmt = lambda t: f"{t:.4f}" if t is not None else "-"
        print(f"| {'x'.join(str(v) for v in r['shape'].values())} | {fmt(r['sdpa_ms'])} | {fmt(r['unmasked_starter_ms'])} "
              f"| {fmt(r['configs'].get(default))} | {fmt(r['configs'].get(best))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
