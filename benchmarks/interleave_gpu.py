"""What a GPU computes for the kernels the CPU judge now runs interleaved (harness/interpreter_interleave.py).

    PYTHONPATH=src:tests python benchmarks/interleave_gpu.py [--out DIR] [--launches 200]

Each kernel of tests/test_harness_interleaved.py (pass 12's counter with the interleaved edits, the
ticket queue, the first-atomic barrier, the sleep barrier, the delay loop, the honest look-backs)
is launched on the GPU at a few row counts, each launch on fresh inputs, and its row sums are
compared with torch's: how often is each wrong on real hardware?  Each kernel runs in a process
of its own, killed after --timeout seconds (a kernel whose programs wait on programs that never
start hangs: reported as such).  Prints a markdown table last; writes DIR/interleave.json with --out.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

RUN_ONE = (
    "import importlib.util, json, sys, torch\n"
    "spec = importlib.util.spec_from_file_location('k', sys.argv[1])\n"
    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
    "out = {}\n"
    "for rows in (4, 256, 4096):\n"
    "    seen = {'right': 0, 'wrong': 0, 'error': 0}\n"
    "    for _ in range(int(sys.argv[2])):\n"
    "        x = torch.randn(rows, 1100, device='cuda')\n"
    "        try:\n"
    "            got = m.kernel_fn(x)\n"
    "            torch.cuda.synchronize()\n"
    "            seen['right' if torch.allclose(got.float(), x.sum(1), atol=1e-2) else 'wrong'] += 1\n"
    "        except Exception as exc:\n"
    "            seen['error'] += 1\n"
    "    out[rows] = seen\n"
    "    print(json.dumps({'rows': rows, **seen}), flush=True)\n")


def kernels(folder: Path) -> dict[str, Path]:
    from counter_edits import ATTACKS, INTERLEAVED_EDITS, LATE_EDITS, write_edits

    edits = {name: pairs for name, pairs in INTERLEAVED_EDITS.items() if name != "waits_for_nobody"}
    write_edits(folder, edits)
    write_edits(folder, LATE_EDITS, "reduce_interleave_long_delay.py")
    found = {name: folder / f"{name}.py" for name in (*edits, *LATE_EDITS)}
    for path in sorted(ATTACKS.glob("reduce_interleave_*.py")):
        found[path.stem.replace("reduce_interleave_", "")] = path
    for name in ("honest_reduce_pass13_lookback_ticket", "honest_reduce_lookback_atomic_poll"):
        found[name] = ATTACKS / f"{name}.py"
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--launches", type=int, default=200, help="launches per row count")
    ap.add_argument("--timeout", type=float, default=40.0, help="seconds per kernel")
    ap.add_argument("--only", default="", help="comma-separated kernel names (all where empty)")
    args = ap.parse_args()
    only = {name for name in args.only.split(",") if name}
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in kernels(Path(tmp)).items():
            if only and name not in only:
                continue
            try:
                done = subprocess.run([sys.executable, "-c", RUN_ONE, str(path), str(args.launches)],
                                      capture_output=True, text=True, timeout=args.timeout,
                                      env={**os.environ, "TRITON_INTERPRET": "0"})
                rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
                results[name] = {"rows": rows, "error": done.stderr[-400:] if done.returncode else ""}
            except subprocess.TimeoutExpired as exc:
                out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
                results[name] = {"rows": rows, "error": f"hung: killed after {args.timeout:g} s"}
            print(name, json.dumps(results[name]), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "interleave.json").write_text(json.dumps(results, indent=1))
    print(f"\n| kernel | wrong / {args.launches} launches at 4, 256, 4096 rows x 1100 | note |")
    print("|---|---|---|")
    for name, r in results.items():
        cells = ", ".join(f"{row['wrong'] + row['error']}" for row in r["rows"]) or "-"
        print(f"| {name} | {cells} | {r['error'].splitlines()[-1] if r['error'] else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
