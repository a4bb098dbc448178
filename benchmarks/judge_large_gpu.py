"""The red-team attacks of 2026-12-01 on a GPU, and what the new rules cost the starters.

    PYTHONPATH=src python benchmarks/judge_large_gpu.py --out DIR [--budget 900]
    PYTHONPATH=src python benchmarks/judge_large_gpu.py --out DIR --cpu-smoke     # CPU, tiny, ~2 min

(a) attacks, each expected ``incorrect`` or ``rejected``: the reduce starter with 32-bit row
    offsets (wrong past 2**31 elements: the held-out ``index-width`` case), the moe_experts
    starter with 32-bit hidden-row offsets (the same case, its rows being tokens), the softmax starter
    that never writes rows past 16384 (``large-rows``), the reduce starter that drops NaNs from
    its sums (numerics ``nonfinite``), and the two host-computed files of tests/attacks
    (``.item()`` + ``fill_``: ``foreign-compute``).
(b) every shipped starter, expected ``pass``: no false positive from the host-read rule (its
    wrappers and audit hook are GPU-untested elsewhere) or the NaN cases, and the held-out
    stage's wall time, which now includes the two large shapes.

Correctness only (``timing=False``).  Writes DIR/judge_large.json and DIR/judge_large.md; prints
the markdown table last.  Steps are skipped once ``--budget`` seconds are spent.  Expected wall
time on an H200: 8-15 minutes, capped by ``--budget`` (mostly Triton compiles of the 15 starters).
With ``--cpu-smoke`` the large-shape bounds are scaled down (40 rows, 4096 elements) and the
one-line edits wrap at those bounds, so every row of the table means the same as on a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STARTERS = ("moe_experts", "reduce", "softmax", "rmsnorm", "layernorm", "cross_entropy", "gelu", "swiglu", "swiglu_packed",
            "geglu", "add_rmsnorm", "add_layernorm", "rotary", "matmul", "attention", "fused_mlp")


def edits(smoke: bool) -> list[tuple[str, str, str, str]]:
    """(name, problem, starter line, replacement)."""
    rows_bound = 40 if smoke else 16384
    wrap = "(rows[:, None] * stride_xm) % 4096" if smoke else "rows[:, None] * stride_xm"
    return [
        ("reduce_offsets_32bit", "reduce", "        row_ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_xm\n",
         f"        row_ptrs = x_ptr + {wrap}\n"),
        ("softmax_rows_bounded", "softmax", "    y = torch.empty_like(x)\n",
         f"    y = torch.empty_like(x)\n    M = min(M, {rows_bound})\n"),
        # the hidden rows' offsets (a token's K rows of I) in 32 bits: moe_experts' rows are tokens
        ("moe_experts_hidden_offsets_32bit", "moe_experts",
         "    tl.store(h_ptr + pos[:, None] * stride_h + rn[None, :], h.to(h_ptr.dtype.element_ty),\n",
         "    tl.store(h_ptr + " + ("(pos[:, None] * stride_h + rn[None, :]) % 4096" if smoke
                                   else "pos.to(tl.int32)[:, None] * stride_h + rn[None, :]")
         + ", h.to(h_ptr.dtype.element_ty),\n"),
        ("reduce_drops_nan", "reduce",
         "            acc += tl.load(row_ptrs + cols[None, :], mask=mask, other=0.0).to(tl.float32)\n",
         "            v = tl.load(row_ptrs + cols[None, :], mask=mask, other=0.0).to(tl.float32)\n"
         "            acc += tl.where(v == v, v, 0.0)\n"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=float, default=900.0, help="seconds; later steps are skipped")
    parser.add_argument("--cpu-smoke", action="store_true", help="CPU interpreter, tiny shapes and bounds")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from autokernel.harness import large_shapes
    from autokernel.harness.evaluate import evaluate
    from autokernel.problems.registry import KERNELS_DIR

    device = "cpu" if args.cpu_smoke or not torch.cuda.is_available() else "cuda"
    if device == "cpu":
        large_shapes.LARGE_ROWS["cpu"], large_shapes.INDEX_ELEMENTS["cpu"] = 40, 4096
    cpu_shapes = {"reduce": ["9x40"], "softmax": ["9x40"], "moe_experts": ["9x3x5x24x20"]}
    started = time.monotonic()
    rows = []

    def judge(kind: str, name: str, problem: str, path: Path, expect: str) -> None:
        if time.monotonic() - started > args.budget:
            rows.append({"kind": kind, "name": name, "verdict": "skipped (budget)", "expect": expect})
            return
        t0 = time.monotonic()
        try:
            ev = evaluate(problem, path, device=device, shapes=cpu_shapes.get(problem) if device == "cpu" else None,
                          timing=False, baselines=False, dtypes=["fp32"] if device == "cpu" else None)
            heldout = next((s.seconds for s in ev.stages if s.name == "heldout"), None)
            row = {"verdict": ev.verdict, "stage": ev.failed_stage, "rules": sorted({f.rule for f in ev.integrity}),
                   "message": ev.message[:240], "heldout_s": heldout}
        except Exception as exc:  # a harness error is a result too
            row = {"verdict": f"error: {type(exc).__name__}: {exc}"[:240]}
        row.update(kind=kind, name=name, expect=expect, wall_s=round(time.monotonic() - t0, 2))
        rows.append(row)
        print(json.dumps(row), flush=True)

    attacks = out / "attacks"
    attacks.mkdir(exist_ok=True)
    for name, problem, line, replacement in edits(device == "cpu"):
        text = (KERNELS_DIR / f"{problem}.py").read_text()
        path = attacks / f"{name}.py"
        path.write_text(text.replace(line, replacement))
        judge("attack", name, problem, path, "incorrect")
    for name, problem in (("reduce_python_item", "reduce"), ("softmax_python_item", "softmax")):
        judge("attack", name, problem, ROOT / "tests" / "attacks" / f"{name}.py", "rejected")
    for kind in (STARTERS if device == "cuda" else ("reduce", "softmax")):
        judge("starter", kind, kind, KERNELS_DIR / f"{kind}.py", "pass")

    def ok(r: dict) -> bool:
        return r.get("verdict") in (("incorrect", "rejected") if r["expect"] != "pass" else ("pass",))

    (out / "judge_large.json").write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    lines = [f"device: {device}", "", "| kind | file | expected | verdict | stage / rules | held-out stage s | wall s | as expected |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        where = r.get("stage") or ""
        if r.get("rules"):
            where += " " + ",".join(r["rules"])
        lines.append(f"| {r['kind']} | {r['name']} | {r['expect']} | {r['verdict']} | {where.strip()} | "
                     f"{r.get('heldout_s') or ''} | {r.get('wall_s', '')} | {'yes' if ok(r) else 'NO'} |")
    table = "\n".join(lines)
    (out / "judge_large.md").write_text(table + "\n")
    print(table)
    return 0 if all(ok(r) for r in rows if "skipped" not in str(r.get("verdict"))) else 1


if __name__ == "__main__":
    sys.exit(main())
