"""selective_scan's fp32 long-memory case on a GPU: the starter and the fp32 reference, each against
the reference in float64 (which of the two drifts), as the judge's bound measures them."""
import sys

import torch

sys.path.insert(0, "src")
from autokernel.problems import selective_scan as ss  # noqa: E402
from autokernel.problems.registry import load_starter  # noqa: E402

tol = ss.TOLERANCES[torch.float32]
starter = load_starter("selective_scan")
for dims in ((1, 4096, 4096, 16), (8, 1536, 2048, 16)):
    shape = dict(zip("BDLN", dims))
    for case, args in ss.adversarial_inputs(shape, torch.float32, "cuda", 11):
        if case not in ("long-memory", "large-u"):
            continue
        exact = ss.reference(*[a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in args])
        for name, out in (("fp32 reference", ss.reference(*args)), ("starter", starter.kernel_fn(*args))):
            err = (out.double() - exact).abs()
            ratio = (err / (tol.atol + tol.rtol * exact.abs())).max().item()
            print(f"{dims} {case:12s} {name:15s} max err {err.max().item():.2e}  of the bound {ratio:.2f}x  "
                  f"rel norm {(err.norm() / exact.norm()).item():.1e}", flush=True)
