"""The CUDA-graph wrapper's static outputs on a GPU (``integrate.cudagraphs``): a call hands out
the graph's output memory without a copy, and reading a returned tensor after the next call of
the same graph raises (a view taken of it before that call is not guarded: printed as info);
the copy it no longer makes, timed.

    PYTHONPATH=src python benchmarks/graph_outputs_gpu.py

Prints one line per check and a table last; exits 1 if a check fails."""
from __future__ import annotations

import sys

import torch

from autokernel.integrate.cudagraphs import STALE, CudaGraphed, can_guard_outputs


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a GPU")
        return 2
    failures = []

    def check(what: str, ok: bool) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            failures.append(what)

    check("this torch can guard static outputs", can_guard_outputs())
    lin = torch.nn.Linear(256, 512, device="cuda", dtype=torch.bfloat16)
    graphed = CudaGraphed(lin)
    x1, x2 = (torch.randn(64, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    with torch.inference_mode():
        want1, want2 = lin(x1), lin(x2)
        first = graphed(x1)
        check("first call right", torch.equal(first, want1))
        kept = first.clone()
        view = first[3]
        first_ptr = first.data_ptr()
        second = graphed(x2)
        check("second call right", torch.equal(second, want2))
        check("no copy: the output is the graph's memory", second.data_ptr() == first_ptr)
        try:
            first.sum().item()
            check("reading the first output after the next call raises", False)
        except RuntimeError as exc:
            check("reading the first output after the next call raises", STALE[:40] in str(exc))
        # not guarded (torch marks a tensor, not its storage): a view taken before the next call
        # reads that call's values; the docs say so
        print(f"info a view taken before the next call reads the next call's values: "
              f"{torch.equal(view, want2[3])}", flush=True)
        check("a clone taken before the next call keeps its values", torch.equal(kept, want1))
        third = graphed(x1)
        check("third call right, the second's output now stale", torch.equal(third, want1))

        # what the copy cost: Gemma-2's logits, 4096 x 256000 bf16
        logits = torch.empty(4096, 256000, device="cuda", dtype=torch.bfloat16)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(3):
            logits.clone()
        torch.cuda.synchronize()
        start.record()
        for _ in range(10):
            logits.clone()
        end.record()
        torch.cuda.synchronize()
        copy_ms = start.elapsed_time(end) / 10
    print("\n| what | value |\n|---|---:|")
    print(f"| checks failed | {len(failures)} |")
    print(f"| copy of 4096 x 256000 bf16 logits (the copy a call no longer makes) | {copy_ms:.3f} ms |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
