"""The come-back memos (red-team pass 30 and after, edits made at test time in
tests/test_harness_attacks_pass30.py) judged on a GPU without the timing, so that each reaches the
evaluation's last calls (with the timing, a memo whose dict keeps every output runs out of GPU
memory first).  Each memo is judged ``--repeats`` times: the gap, its rounds and the shared
scalars are drawn per evaluation.

    PYTHONPATH=src python benchmarks/come_back_memos_gpu.py --out OUT
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_harness_attacks_pass30 as p30  # noqa: E402

from autokernel.harness import stages  # noqa: E402
from autokernel.harness.evaluate import evaluate  # noqa: E402

MEMOS = {
    "come back after one other call": ("xielu", ()),
    "after two other calls or more": ("xielu", p30.after_many_other_calls(2)),
    "after known calls": ("softcap", p30.after_known_calls(1)),
    "after calls with its own scalars": ("rmsnorm", p30.after_calls_with_its_scalars()),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtypes", default="fp32")
    parser.add_argument("--memos", default=",".join(MEMOS), help="comma-separated names of MEMOS")
    parser.add_argument("--shared", action="store_true",
                        help="the gap's cases always share the first case's scalars (drawn half the time)")
    args = parser.parse_args()
    if args.shared:
        stages.come_back_shares_scalars = lambda: True
    drawn = []  # what each evaluation's last calls held (the gap, its rounds, shared scalars)
    late_rewrites = stages.late_rewrites

    def noted(judge, plan):  # an evaluation the last calls reject keeps "-"
        drawn[-1] = late_rewrites(judge, plan)
        return drawn[-1]

    stages.late_rewrites = noted
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.memos.split(","):
        kind, edits = MEMOS[name]
        for i in range(args.repeats):
            path = p30.with_starter(Path(tempfile.mkdtemp()), kind, p30.COME_BACK_MEMO, edits)
            started = time.perf_counter()
            drawn.append("-")
            ev = evaluate(kind, path, device="cuda", dtypes=args.dtypes.split(","), timing=False, baselines=False)
            rules = sorted({f.rule for f in ev.integrity})
            rows.append({"memo": name, "kind": kind, "run": i, "verdict": ev.verdict, "stage": ev.failed_stage,
                         "rules": rules, "seconds": round(time.perf_counter() - started, 1),
                         "message": ev.message[:300], "last_calls": drawn[-1]})
            print(json.dumps(rows[-1]), flush=True)
    (args.out / "come_back_memos.json").write_text(json.dumps(rows, indent=1))
    print("\n| memo | kind | run | verdict | stage | rules | s | last calls |\n|---|---|---|---|---|---|---:|---|")
    for r in rows:
        print(f"| {r['memo']} | {r['kind']} | {r['run']} | {r['verdict']} | {r['stage'] or '-'} | "
              f"{', '.join(r['rules']) or '-'} | {r['seconds']} | {r['last_calls']} |")


if __name__ == "__main__":
    main()
