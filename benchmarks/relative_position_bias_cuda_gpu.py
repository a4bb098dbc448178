"""The relative_position_bias starter's buckets against the problem's, distance by distance, and
where the device's own (eager) chain differs from the problem's.

    PYTHONPATH=src python benchmarks/relative_position_bias_cuda_gpu.py

On an H100 (2026-12-06) the starter, then written to take CUDA's steps (reciprocal divisions,
libdevice's float32 log), failed the GPU judge at a log-boundaries case, one bucket off eager
where the scaled log is an integer.  The problem now holds every device to PyTorch's CPU chain
(the correctly rounded float32 log at every sensitive distance) and the starter computes that
chain (true divisions, the log in float64 rounded to float32).  This lists, for T5's 32 buckets
both ways and one way and max_distance 9 to 299 and a few larger, each configuration where the
starter's bucket differs from the problem's (should be none), and each where the device's eager
chain does (informative: eager's own rounding), with the float32 steps in hex for the first few.
On a CPU (TRITON_INTERPRET=1) it runs a small range.
"""
import math
import sys

import torch

sys.path.insert(0, "src")
from autokernel.kernels.relative_position_bias import kernel_fn  # noqa: E402
from autokernel.problems import get_problem  # noqa: E402


def bucket_rows(device: str, bidirectional: bool, max_distance: int, keys: int) -> dict[str, torch.Tensor]:
    """One query's buckets (T5's 32 buckets) from the problem's chain, the device's eager chain and
    the starter, each as the distances' rows."""
    table = torch.arange(32, dtype=torch.float32, device=device)[:, None].repeat(1, 2)
    offset = 0 if bidirectional else keys  # one way: the keys before the query
    args = (table, 1, keys, offset, bidirectional, max_distance)
    problem = get_problem("relative_position_bias")
    return {"problem": problem.reference(*args)[0, 0, 0].long(), "eager": problem.eager(*args)[0, 0, 0].long(),
            "starter": kernel_fn(*args)[0, 0, 0].long()}


def steps_hex(device: str, n: int, max_exact: int, max_distance: int, side: int) -> str:
    ratio = torch.tensor([float(n)], device=device) / max_exact
    log = torch.log(ratio)
    steps = log / math.log(max_distance / max_exact) * (side - max_exact)
    return f"ratio {ratio.item().hex()} log {log.item().hex()} steps {steps.item().hex()}"


def main() -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    distances = list(range(9, 300)) + [511, 1000, 2047, 4096] if device == "cuda" else [9, 130]
    keys = 4096 if device == "cuda" else 300
    off = {"starter": 0, "eager": 0}
    for bidirectional in (True, False):
        side = 16 if bidirectional else 32
        max_exact = side // 2
        for max_distance in (d for d in distances if d > max_exact):
            rows = bucket_rows(device, bidirectional, max_distance, keys)
            for who in off:
                wrong = (rows[who] != rows["problem"]).nonzero().flatten()
                if not wrong.numel():
                    continue
                off[who] += 1
                if off[who] <= 6:
                    n = int(wrong[0]) if bidirectional else keys - int(wrong[0])
                    print(f"{who}: bidirectional {bidirectional} max_distance {max_distance}: {wrong.numel()} "
                          f"distances off the problem's buckets, first {n} (row {int(rows[who][wrong[0]])} for "
                          f"{int(rows['problem'][wrong[0]])}): {device} {steps_hex(device, n, max_exact, max_distance, side)}")
    print(f"{device}: configurations with a bucket off the problem's: starter {off['starter']}, "
          f"eager on {device} {off['eager']}")
    return 1 if off["starter"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
