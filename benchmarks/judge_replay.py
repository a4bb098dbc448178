"""The judge's cost on the same candidates: replay a loop's proposals through one judge.

    python benchmarks/judge_replay.py --kind rmsnorm --log LOGDIR --out OUT.json [--label new]

LOGDIR is a loop's log folder for one problem (`WORKDIR/logs/RUN/KIND`, holding `exp_0000.py`,
the starting kernel, and `exp_NNNN.py`, the agent's proposals).  Every proposal is judged against
`exp_0000.py` as the loop judges (an `Evaluator` that lives across the evaluations, the incumbent
in a worker of its own, `stop_at_loss=True` where the judge has it), on this process's device,
after one evaluation of the starting kernel alone that warms the caches and is not counted.

Run it once with this tree on `PYTHONPATH` and once with an older tree's `src` (the script uses
only `Evaluator`), on the same GPU in the same call: the two judges then time the same files, and
the agent's share of each loop row (the row's wall time less its evaluation's) turns each judge's
evaluation times into the loop's experiments per hour with the same agent
(`judge_replay.py --table NEW.json OLD.json --rows RESULTS_TSV`)."""
from __future__ import annotations

import argparse
import csv
import inspect
import json
import statistics
import sys
import time
from pathlib import Path


def replay(kind: str, log: Path, device: str, most: int | None = None) -> dict:
    from autokernel.harness import Evaluator

    start = log / "exp_0000.py"
    proposals = sorted(p for p in log.glob("exp_*.py") if p.name != start.name)[:most]
    options = {"device": device, "baselines": False}
    if "stop_at_loss" in inspect.signature(Evaluator.__init__).parameters:
        options["stop_at_loss"] = True
    rows = []
    with Evaluator(kind, **options) as evaluator:
        warm_from = time.perf_counter()
        warm = evaluator.evaluate(start)
        print(f"warm-up: the starting kernel alone, {warm.verdict}, {time.perf_counter() - warm_from:.2f} s", flush=True)
        for path in proposals:
            ev = evaluator.evaluate(path, incumbent_file=start)
            significant = ev.vs_incumbent.significant if ev.vs_incumbent is not None else None
            rows.append({"experiment": int(path.stem.split("_")[1]), "verdict": ev.verdict, "wall_s": ev.wall_s,
                         "phases": getattr(ev, "phases", None) or {}, "faster": significant,
                         "message": (ev.message or "")[-300:]})
            print(f"{path.name}: {ev.verdict} {ev.wall_s:.2f} s faster={significant} {rows[-1]['phases']}", flush=True)
    return {"kind": kind, "options": {k: v for k, v in options.items()}, "rows": rows}


def agent_seconds(results_tsv: Path) -> dict[int, float]:
    """Per experiment: the loop row's wall time less its evaluation's (the agent's proposal).
    The rows are read as plain dicts: only the experiment number and the wall time are needed."""
    out = {}
    workdir = results_tsv.parent
    with results_tsv.open(newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    for row in rows:
        number = int(row["experiment"])
        found = list(workdir.glob(f"logs/*/*/exp_{number:04d}.json"))
        if not found or not row.get("wall_s"):
            continue
        evaluation = json.loads(found[0].read_text())
        out[number] = max(0.0, float(row["wall_s"]) - float(evaluation.get("wall_s") or 0.0))
    return out


def table(runs: list[dict], labels: list[str], agent: dict[int, float]) -> None:
    """One row per judge; the last column is each judge's median evaluation over the last one's
    (list the old judge last)."""
    print("| judge | proposals | verdicts | evaluation s (median / mean) | loop experiments/h with the same agent "
          f"| median phases s | median evaluation / {labels[-1]}'s |")
    print("|---|---:|---|---|---:|---|---:|")
    last = [r["wall_s"] for r in runs[-1]["rows"]]
    reference = statistics.median(last) if last else None
    for label, run in zip(labels, runs):
        rows = run["rows"]
        if not rows:
            print(f"| {label} | 0 | | | | | |")
            continue
        walls = [r["wall_s"] for r in rows]
        verdicts = {}
        for r in rows:
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        loop_s = [r["wall_s"] + agent.get(r["experiment"], 0.0) for r in rows]
        names = sorted({k for r in rows for k in r["phases"]})
        phases = ", ".join(f"{k} {statistics.median(r['phases'].get(k, 0.0) for r in rows):.2f}" for k in names)
        median = statistics.median(walls)
        ratio = f"{median / reference:.2f}x" if reference else ""
        print(f"| {label} | {len(rows)} | {', '.join(f'{k} {v}' for k, v in sorted(verdicts.items()))} | "
              f"{median:.2f} / {statistics.fmean(walls):.2f} | {3600 * len(loop_s) / sum(loop_s):.0f} | {phases} | "
              f"{ratio} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--kind")
    ap.add_argument("--log", type=Path, help="a loop's log folder for one problem (exp_0000.py and the proposals)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--max", type=int, default=None, help="replay the first MAX proposals only")
    ap.add_argument("--table", type=Path, nargs="+", help="print the table of earlier replays (JSON files)")
    ap.add_argument("--labels", nargs="+", help="one name per --table file (default: the file names)")
    ap.add_argument("--rows", type=Path, help="the loop's results.tsv: the agent's time per experiment")
    args = ap.parse_args()
    if args.table:
        runs = [json.loads(p.read_text()) for p in args.table]
        labels = args.labels or [p.stem for p in args.table]
        if len(labels) != len(runs):
            print("give one label per --table file", file=sys.stderr)
            return 2
        table(runs, labels, agent_seconds(args.rows) if args.rows else {})
        return 0
    if not (args.kind and args.log and args.out):
        print("give --kind, --log and --out (or --table FILES)", file=sys.stderr)
        return 2
    if not (args.log / "exp_0000.py").is_file():
        print(f"no exp_0000.py in {args.log}: give a loop's log folder for one problem", file=sys.stderr)
        return 2
    result = replay(args.kind, args.log, args.device, args.max)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
