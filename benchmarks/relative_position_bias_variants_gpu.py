"""Where relative_position_bias's GPU time goes: the starter against variants of it at T5-base's
encoder shape (12 heads, 512 x 512, 32 buckets both ways, bf16), each checked bit for bit against
the problem's reference, timed by do_bench (host launch included) and as GPU work alone (ten calls
captured in a CUDA graph, replayed), beside eager and torch.compile (default mode).

Variants: the starter (since 2026-12-07 one launch in which each program computes the buckets of
the distances its tile spans once and gathers from them) over five more tilings; the starter
before it (``variants/relative_position_bias_per_pair.py``: a bucket for every query-key pair)
with the float32 log in place of the float64 one (not exact: a timing probe), with no log at all
(the far buckets wrong: a timing probe) and one more tiling; and
``variants/relative_position_bias_lut.py`` (each distance's bucket once by a first launch, then a
gather).  On an H100 (2026-12-07) the per-pair starter took 38.3 us of GPU work, the tile gather
at ROWS 32, BLOCK_K 64 9.2 us, torch.compile 11.8, for a 6.3 MB output (1.5 us at 4.2 TB/s).

    python benchmarks/relative_position_bias_variants_gpu.py [--out DIR]
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import traceback
from pathlib import Path

import torch
import triton.testing

from autokernel.problems import get_problem

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models_gpu import device_time_ms  # noqa: E402

HERE = Path(__file__).resolve().parent
STARTER = HERE.parent / "src" / "autokernel" / "kernels" / "relative_position_bias.py"
SHAPE = {"H": 12, "Sq": 512, "Sk": 512, "NB": 32, "bidirectional": 1}
PER_PAIR_KNOBS = 'KNOBS = {"BLOCK_K": 256, "BLOCK_H": 16, "ROWS": 2, "num_warps": 4}'
STARTER_KNOBS = 'KNOBS = {"BLOCK_K": 64, "ROWS": 32, "num_warps": 4}'


def variants() -> dict[str, str]:
    per_pair = (HERE / "variants" / "relative_position_bias_per_pair.py").read_text()
    edits = {
        "per pair, float32 log (inexact)": ("return tl.log(x.to(tl.float64)).to(tl.float32)", "return tl.log(x)"),
        "per pair, no log (inexact)": ("far = tl.minimum(max_exact + steps.to(tl.int32), side - 1)",
                                       "far = tl.minimum(max_exact + n, side - 1)"),
        "per pair, ROWS 1, BLOCK_K 1024, 8 warps": (
            PER_PAIR_KNOBS, PER_PAIR_KNOBS.replace('"BLOCK_K": 256', '"BLOCK_K": 1024').replace('"ROWS": 2', '"ROWS": 1')
            .replace('"num_warps": 4', '"num_warps": 8')),
    }
    starter = STARTER.read_text()
    if STARTER_KNOBS not in starter:
        raise SystemExit("the starter's knobs changed: its tilings no longer apply")
    out = {"starter (a tile's distances once, ROWS 32, BLOCK_K 64)": starter}
    for rows, block_k, warps in ((16, 128, 4), (32, 64, 8), (16, 64, 4), (32, 128, 4), (8, 256, 4)):
        out[f"starter at ROWS {rows}, BLOCK_K {block_k}, {warps} warps"] = starter.replace(
            STARTER_KNOBS, f'KNOBS = {{"BLOCK_K": {block_k}, "ROWS": {rows}, "num_warps": {warps}}}')
    out["per pair (the starter before 2026-12-07)"] = per_pair
    for name, (old, new) in edits.items():
        if old not in per_pair:
            raise SystemExit(f"the per-pair variant changed: {name}'s edit no longer applies")
        out[name] = per_pair.replace(old, new)
    out["bucket per distance, then gather"] = (HERE / "variants" / "relative_position_bias_lut.py").read_text()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    problem = get_problem("relative_position_bias")
    inputs = problem.make_inputs(dict(SHAPE), torch.bfloat16, "cuda", 0)
    ref = problem.reference(*inputs)
    folder = Path(tempfile.mkdtemp())
    compiled = torch.compile(problem.eager)
    fns = {}
    for i, (name, text) in enumerate(variants().items()):
        path = folder / f"variant_{i}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"variant_{i}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fns[name] = (lambda m=module: m.kernel_fn(*inputs))
    fns["eager"] = lambda: problem.eager(*inputs)
    fns["torch.compile (default)"] = lambda: compiled(*inputs)
    rows = []
    for name, fn in fns.items():
        try:
            exact = torch.equal(fn(), ref)
            bench = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            alone = device_time_ms(fn, fallback=False)  # GPU work alone, never host time in its place
        except Exception:  # noqa: BLE001 - a variant that fails is a row that says so
            traceback.print_exc()
            rows.append(f"| {name} | failed | - | - |")
            continue
        rows.append(f"| {name} | {'yes' if exact else 'no'} | {bench * 1e3:.1f} | {alone * 1e3:.1f} |")
    table = "\n".join([f"relative_position_bias at {SHAPE}, bf16, {torch.cuda.get_device_name()}", "",
                       "| variant | exact | do_bench us | GPU work alone us |", "|---|---|---:|---:|", *rows])
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "relative_position_bias_variants.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
