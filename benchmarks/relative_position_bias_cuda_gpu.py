"""The relative_position_bias starter's buckets against PyTorch's on one device, distance by distance.

    PYTHONPATH=src python benchmarks/relative_position_bias_cuda_gpu.py

On an H100 (2026-12-06) the starter failed the GPU judge at a log-boundaries case (one bucket off
where the scaled log is an integer): this lists, for T5's 32 buckets both ways and one way and
max_distance 9 to 299 and a few larger, each configuration where a distance's bucket differs, with
PyTorch's intermediate float32 values (ratio, log, steps) in hex for the first few.  On a CPU
(TRITON_INTERPRET=1) it runs a small range and should find none.
"""
import math
import sys

import torch

sys.path.insert(0, "src")
from autokernel.kernels.relative_position_bias import kernel_fn  # noqa: E402
from autokernel.problems import position_buckets  # noqa: E402


def mismatches(device: str, bidirectional: bool, max_distance: int, keys: int) -> torch.Tensor:
    """The distances whose starter bucket differs from PyTorch's (T5's 32 buckets, one query)."""
    table = torch.arange(32, dtype=torch.float32, device=device)[:, None].repeat(1, 2)
    offset = 0 if bidirectional else keys  # one way: the keys before the query
    ref = position_buckets.buckets(position_buckets.relative_positions(1, keys, offset, device), bidirectional, 32,
                                   max_distance)[0]
    out = kernel_fn(table, 1, keys, offset, bidirectional, max_distance)[0, 0, 0].long()
    keys_off = (ref != out).nonzero().flatten()
    return keys_off if bidirectional else keys - keys_off


def main() -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    distances = list(range(9, 300)) + [511, 1000, 2047, 4096] if device == "cuda" else [9, 130]
    keys = 4096 if device == "cuda" else 300
    bad = 0
    for bidirectional in (True, False):
        max_exact = 8 if bidirectional else 16
        for max_distance in (d for d in distances if d > max_exact):
            wrong = mismatches(device, bidirectional, max_distance, keys)
            if not wrong.numel():
                continue
            bad += 1
            if bad <= 6:
                n = int(wrong[0])
                ratio = torch.tensor([float(n)], device=device) / max_exact
                log = torch.log(ratio)
                steps = log / math.log(max_distance / max_exact) * ((16 if bidirectional else 32) - max_exact)
                print(f"bidirectional {bidirectional} max_distance {max_distance}: {wrong.numel()} distances off, "
                      f"first {n}: ratio {ratio.item().hex()} log {log.item().hex()} steps {steps.item().hex()}")
    print(f"{device}: configurations with a bucket off PyTorch's: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
