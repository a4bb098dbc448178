"""What `profile` costs on a GPU, and how much of it is the placement check's counting forward
(``integrate/placement.py``: the patched copy runs one forward with counting stand-in ops, added in
the thirtieth session and never timed on a GPU).  Per model: the whole ``profile_model``, then
``mark_placement`` alone on the plan it made (the check with its forward), then one forward of
the original model, each wall time after a synchronize.

    python benchmarks/profile_cost_gpu.py [--models llama,hf:gpt2] [--shape 4x1024] [--out DIR]
"""
from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import torch

from autokernel.integrate.placement import mark_placement
from autokernel.models import load_model
from autokernel.profiler import profile_model


def _timed(fn) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="llama,hf:gpt2")
    ap.add_argument("--shape", default="4x1024")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    gpu = torch.cuda.is_available()
    rows = []
    for spec in args.models.split(","):
        loaded = load_model(spec, dtype=torch.bfloat16 if gpu else torch.float32, device="cuda" if gpu else "cpu",
                            input_shape=args.shape)
        inputs = loaded.make_inputs(0)
        with torch.no_grad():
            loaded.model(*inputs)  # warm
            forward_s = _timed(lambda: loaded.model(*inputs))
        plan = None

        def profile():
            nonlocal plan
            plan = profile_model(loaded)

        profile_s = _timed(profile)
        fresh = copy.deepcopy(plan)
        check_s = _timed(lambda: mark_placement(fresh, loaded.model, inputs, False))
        rows.append(f"| {spec} | {args.shape} | {profile_s:.2f} | {check_s:.2f} | {check_s / profile_s:.0%} | "
                    f"{forward_s * 1e3:.1f} |")
        del loaded
        if gpu:
            torch.cuda.empty_cache()
    device = torch.cuda.get_device_name() if gpu else "CPU"
    table = "\n".join([f"profile's cost on {device}, torch {torch.__version__}", "",
                       "| model | tokens | profile s | placement check s | check / profile | one forward ms |",
                       "|---|---|---:|---:|---:|---:|", *rows])
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "profile_cost.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
