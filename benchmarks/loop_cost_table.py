"""Loop cost side by side: the workspaces of `gpu_suite.py loop` runs of two judges (e.g. the old
judge's tree and this one, run in the same call on the same GPU), read from their results.tsv.

    python benchmarks/loop_cost_table.py OLD_OUT NEW_OUT

OLD_OUT and NEW_OUT are the `--out` folders of the two runs (each holds `loop_KIND/`). Per kind
and judge: experiments, their statuses, the median and mean wall time of an experiment row
(proposal + evaluation), experiments per hour after the first (cold) evaluation, and the new
judge's cost against the old one's (goal of issue 9: no more than 10% slower)."""
from __future__ import annotations

import csv
import statistics
import sys
from collections import Counter
from pathlib import Path


def rows_of(out: Path, kind: str) -> list[dict]:
    """The rows as plain dicts: the old judge's tree may write other columns than this one's."""
    tsv = out / f"loop_{kind}" / "results.tsv"
    if not tsv.exists():
        return []
    with tsv.open(newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def summary(rows: list[dict]) -> dict | None:
    experiments = [r for r in rows if r["status"] != "baseline"]
    walls = [float(r["wall_s"]) for r in experiments if r.get("wall_s")]
    if not walls:
        return None
    return {"n": len(experiments), "median": statistics.median(walls), "mean": statistics.fmean(walls),
            "per_hour": 3600.0 * len(walls) / sum(walls),
            "statuses": ", ".join(f"{k} {v}" for k, v in Counter(r["status"] for r in experiments).most_common())}


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    old_out, new_out = Path(sys.argv[1]), Path(sys.argv[2])
    kinds = sorted({p.name[len("loop_"):] for out in (old_out, new_out) if out.is_dir()
                    for p in out.glob("loop_*") if p.is_dir()})
    print("| kind | judge | experiments | statuses | wall per experiment s (median / mean) | experiments/h "
          "(after the first evaluation) | new / old (median wall) |")
    print("|---|---|---:|---|---|---:|---:|")
    for kind in kinds:
        old, new = summary(rows_of(old_out, kind)), summary(rows_of(new_out, kind))
        for name, s in (("old", old), ("new", new)):
            if s is None:
                print(f"| {kind} | {name} | no experiments | | | | |")
                continue
            ratio = f"{new['median'] / old['median']:.2f}x" if name == "new" and old and new else ""
            print(f"| {kind} | {name} | {s['n']} | {s['statuses']} | {s['median']:.2f} / {s['mean']:.2f} | "
                  f"{s['per_hour']:.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
