"""Which part of a CUDA-graph-mode verify fails on a GPU: the patched model in our graphs alone
(no torch.compile), each kernel alone in our graphs, then with torch.compile's reduce-overhead
beside it.  Each verify runs in a subprocess of its own (a launch failure poisons the CUDA
context) with CUDA_LAUNCH_BLOCKING=1.

    PYTHONPATH=src python benchmarks/graphs_check_gpu.py --out DIR [--model hf:gpt2] [--shape 4x512]

(seventeenth session: `models_gpu.py --cuda-graphs --compile-mode reduce-overhead --models hf:gpt2`
failed with "CUDA error: unspecified launch failure" while timing.)  Prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

VERIFY = """
import json, sys
from autokernel.verify import verify
wd, compile_mode = sys.argv[1], sys.argv[2]
v = verify(wd, seeds=(0,), compile=compile_mode != "none", compile_mode=compile_mode if compile_mode != "none" else
           "max-autotune-no-cudagraphs", cuda_graphs=True, iters=5, breakdown=False, log=print)
print("RESULT", json.dumps({"passed": v.passed, "patched_ms": v.patched_ms, "compile_ms": v.compile_ms,
                            "compile_patched_ms": v.compile_patched_ms, "eager_ms": v.eager_ms}))
"""


def run_verify(wd: Path, compile_mode: str, log, blocking: bool = True) -> dict:
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1" if blocking else "0")
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", VERIFY, str(wd), compile_mode], capture_output=True, text=True,
                          env=env, timeout=240)
    out = proc.stdout + proc.stderr
    (wd / f"verify_{compile_mode}.log").write_text(out)
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    row = json.loads(line[7:]) if line else {"error": next((x for x in reversed(out.splitlines())
                                                              if "Error" in x or "error" in x), "no result")[:200]}
    row.update(workdir=wd.name, compile=compile_mode + ("" if blocking else " (launches not blocking)"),
               wall_s=round(time.time() - t0, 1))
    log(f"{wd.name} compile={compile_mode}: {row}")
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="hf:gpt2")
    ap.add_argument("--shape", default="4x512")
    ap.add_argument("--no-blocking", action="store_true", help="first without CUDA_LAUNCH_BLOCKING, both ways")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from models_gpu import starters_workdir

    args.out.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, flush=True)

    wd = starters_workdir(args.out / "workdirs", args.model, None, args.shape, True, captured=True)
    names = sorted(p.name for p in (wd / "problems").iterdir() if (p / "kernel.py").is_file())
    rows = []
    if args.no_blocking:
        rows += [run_verify(wd, "none", log, blocking=False), run_verify(wd, "reduce-overhead", log, blocking=False)]
    rows.append(run_verify(wd, "none", log))
    if "error" in rows[-1]:
        for name in names:  # each kernel alone in our graphs
            alone = wd.parent / f"{wd.name}_{name}"
            shutil.copytree(wd, alone, ignore=shutil.ignore_patterns("verify*.json", "verify_*.log"))
            for other in names:
                if other != name:
                    shutil.rmtree(alone / "problems" / other)
            rows.append(run_verify(alone, "none", log))
    else:
        rows.append(run_verify(wd, "reduce-overhead", log))
    (args.out / "graphs_check.json").write_text(json.dumps(rows, indent=2))
    print("| workdir | torch.compile | passed | patched ms | compile ms | compile(patched) ms | error |")
    print("|---|---|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['workdir']} | {r['compile']} | {r.get('passed', '-')} | {r.get('patched_ms') or '-'} | "
              f"{r.get('compile_ms') or '-'} | {r.get('compile_patched_ms') or '-'} | {r.get('error', '')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
