"""Red-team pass 28's address-keyed memo on a GPU: a starter behind a memo keyed on its inputs'
addresses and layouts plus the scalars, through the GPU judge (no timing), three runs a kind.  On
PyTorch 2.12 or later the worker hands smoke's in-place rewrites the previous call's memory; before
it, whether the memo is caught rests on the caching allocator handing the freed block out again.

    python benchmarks/address_memo_gpu.py [--runs 3]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_harness_attacks_pass28 import ADDRESS_MEMO  # noqa: E402

from autokernel.harness.evaluate import evaluate  # noqa: E402
from autokernel.problems.registry import KERNELS_DIR  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kinds", default="xielu,softcap,relative_position_bias")
    args = ap.parse_args()
    swap = hasattr(torch.UntypedStorage, "_swap_data_ptr_")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, rewrites at the old memory: {swap}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            path = Path(tmp) / f"{kind}_address_memo.py"
            path.write_text((KERNELS_DIR / f"{kind}.py").read_text() + ADDRESS_MEMO)
            for run in range(args.runs):
                ev = evaluate(kind, path, device="cuda", timing=False, baselines=False)
                rules = sorted({f.rule for f in ev.integrity})
                rows.append((kind, run, ev.verdict, ev.failed_stage or "-", ",".join(rules) or "-"))
                print(rows[-1], (ev.message or "")[:160], flush=True)
    print("\n| kind | run | verdict | stage | rules |\n|---|---:|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


if __name__ == "__main__":
    main()
