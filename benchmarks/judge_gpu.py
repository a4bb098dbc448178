"""The judge on a GPU: what it costs, and whether GPU-only tricks get past it.

    PYTHONPATH=src python benchmarks/judge_gpu.py --out DIR [--budget 900] [--loop-budget 90s]
    PYTHONPATH=src python benchmarks/judge_gpu.py --out DIR --cpu-smoke        # CPU, tiny, ~3-6 min

(a) cost: evaluation wall time of ``Evaluator.evaluate`` on the softmax, rmsnorm and matmul
    starters (the first evaluation of each, then the median of the next ``--repeats``), and the
    loop's experiments per hour from ``python -m autokernel optimize --problem softmax
    --budget 90s``.  Part (a) uses only APIs that exist at commit 4d4b81e, so the same command
    with PYTHONPATH pointing at an older ``src`` gives the before numbers.
(b) GPU-only attacks (each a kernel file written under DIR/attacks): the work on a side CUDA
    stream so that the timing misses it; a cache hit padded with a partial matmul so that it
    stays above the roofline floor; atomics that are nondeterministic at the shapes the
    determinism stage did not use.  Each is run through the judge twice: as written, and with
    the judge's static checks switched off (what a file that slipped past them would meet).
    "caught" means rejected or incorrect, or (for the cache hit) no faster than the honest
    starter.

Writes DIR/judge_gpu.json and DIR/judge_gpu.md; prints the markdown tables last.  Every step is
skipped once ``--budget`` seconds are spent.  Expected wall time on an H200: 8-12 minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

STARTERS = ("softmax", "rmsnorm", "matmul")

SIDE_STREAM = '''"""GPU attack: softmax computed on a side CUDA stream; the default stream the judge times
sees nothing (names built so that no stream API shows in the text)."""
import torch
import triton
import triton.language as tl

_side = []
_make_stream = getattr(torch.cuda, "Str" + "eam")
_use_stream = getattr(torch.cuda, "str" + "eam")


@triton.jit
def _softmax(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m, x)
        s = s * tl.exp(tl.where(new_m == float("-inf"), 0.0, m - new_m)) + tl.where(x == float("-inf"), 0.0, tl.exp(x - new_m))
        m = new_m
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * N + cols, (tl.exp(x - row_max) / total).to(out_ptr.dtype.element_ty), mask=cols < N)


def kernel_fn(x):
    x = x.contiguous()
    M, N = x.shape
    out = torch.empty_like(x)
    if not _side:
        _side.append(_make_stream())
    with _use_stream(_side[0]):
        _softmax[(M,)](x, out, N, x.stride(0), BLOCK=1024)
    return out
'''

PADDED_CACHE = '''"""GPU attack: matmul that remembers its results by data pointer and a few sampled values;
on a hit it copies the cached result and pads the call with a matmul over 60% of K, so that the
time stays above the roofline floor while beating the honest kernel."""
import torch
import triton
import triton.language as tl

_memo = {}


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
        UPCAST: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if UPCAST:  # the CPU interpreter's dot wants fp32
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def _matmul(a, b, k):
    M, N = a.shape[0], b.shape[1]
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    bm = 64 if a.is_cuda else 16
    _mm[(triton.cdiv(M, bm), triton.cdiv(N, bm))](a, b, out, M, N, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                                   BM=bm, BN=bm, BK=32 if a.is_cuda else 16, UPCAST=not a.is_cuda)
    return out


def kernel_fn(a, b):
    key = (a.data_ptr(), b.data_ptr(), tuple(a.shape), tuple(b.shape), float(a.reshape(-1)[0]), float(b.reshape(-1)[-1]))
    hit = _memo.get(key)
    if hit is not None:
        _matmul(a, b, max(1, (a.shape[1] * 6) // 10))  # padding: looks like work
        out = torch.empty_like(hit)
        _copy[(triton.cdiv(out.numel(), 1024),)](hit, out, out.numel(), BLOCK=1024)
        return out
    out = _matmul(a, b, a.shape[1])
    _memo[key] = out
    return out
'''

ATOMICS = '''"""GPU attack: row sums accumulated with fp32 atomics (order-dependent bits) at every shape
but the largest one, which is the shape the determinism stage used to check."""
import torch
import triton
import triton.language as tl

DETERMINISTIC_AT = LARGEST


@triton.jit
def _chunk_sum(x_ptr, out_ptr, N, stride, CHUNK: tl.constexpr):
    row, chunk = tl.program_id(0), tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def _cast(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n).to(dst.dtype.element_ty), mask=offs < n)


def kernel_fn(x):
    x = x.contiguous()
    M, N = x.shape
    acc = torch.zeros((M,), dtype=torch.float32, device=x.device)
    if M * N >= DETERMINISTIC_AT:
        _row_sum[(M,)](x, acc, N, x.stride(0), BLOCK=1024)
    else:
        _chunk_sum[(M, triton.cdiv(N, 64))](x, acc, N, x.stride(0), CHUNK=64)
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    _cast[(triton.cdiv(M, 1024),)](acc, out, M, BLOCK=1024)
    return out
'''


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


class Clock:
    def __init__(self, budget: float):
        self.start = time.perf_counter()
        self.budget = budget

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)


def evaluation_cost(device: str, repeats: int, clock: Clock, log: list) -> list[dict]:
    from autokernel.harness.evaluate import Evaluator
    from autokernel.problems.registry import KERNELS_DIR

    rows = []
    for kind in STARTERS:
        if clock.left() < 60:
            rows.append({"kind": kind, "skipped": "budget"})
            continue
        walls, verdicts = [], []
        with Evaluator(kind, device=device, timeout_s=300) as ev:
            for _ in range(1 + repeats):
                if clock.left() < 30:
                    break
                t0 = time.perf_counter()
                result = ev.evaluate(KERNELS_DIR / f"{kind}.py")
                walls.append(time.perf_counter() - t0)
                verdicts.append(result.verdict)
                log.append({"step": "evaluate", "kind": kind, "wall_s": walls[-1], "verdict": result.verdict,
                            "message": result.message[:300]})
        rows.append({"kind": kind, "first_s": walls[0] if walls else None,
                     "warm_median_s": statistics.median(walls[1:]) if len(walls) > 1 else None,
                     "n": len(walls), "verdicts": sorted(set(verdicts))})
    return rows


def loop_rate(device: str, loop_budget: str, out: Path, clock: Clock, log: list) -> dict:
    seconds = _seconds(loop_budget)
    if clock.left() < seconds + 120:
        return {"skipped": "budget"}
    workdir = out / "loop_workdir"
    cmd = [sys.executable, "-m", "autokernel", "optimize", "--problem", "softmax", "--budget", loop_budget,
           "--workdir", str(workdir), "--device", device, "--quiet"]
    env = dict(os.environ)
    if device == "cuda":
        env.pop("TRITON_INTERPRET", None)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 600)
    wall = time.perf_counter() - t0
    (out / "loop.stdout.txt").write_text(proc.stdout[-20000:])
    (out / "loop.stderr.txt").write_text(proc.stderr[-20000:])
    rows = list(workdir.rglob("results.tsv"))
    n = sum(max(0, len(p.read_text().splitlines()) - 1) for p in rows)
    log.append({"step": "optimize", "rc": proc.returncode, "wall_s": wall, "experiments": n})
    return {"rc": proc.returncode, "wall_s": wall, "experiments": n,
            "per_hour": n / wall * 3600 if wall > 0 else None}


def _seconds(text: str) -> float:
    text = text.strip().lower()
    if text.endswith("s"):
        return float(text[:-1])
    if text.endswith("m"):
        return float(text[:-1]) * 60
    return float(text)


def attacks(device: str, out: Path, clock: Clock, log: list, cpu_smoke: bool) -> list[dict]:
    from autokernel.harness import integrity
    from autokernel.harness.evaluate import Evaluator
    from autokernel.problems.registry import KERNELS_DIR, get_problem

    folder = out / "attacks"
    folder.mkdir(parents=True, exist_ok=True)
    reduce_shapes = get_problem("reduce").shapes_for(device)
    largest = max(s["M"] * s["N"] for s in reduce_shapes)
    files = {
        "side-stream softmax": ("softmax", SIDE_STREAM, None),
        "padded cache hit (matmul)": ("matmul", PADDED_CACHE, "matmul"),
        "atomics at unchecked shapes (reduce)": ("reduce", ATOMICS.replace("LARGEST", str(largest)), None),
    }
    rows = []
    real_static = integrity.static_findings
    for name, (kind, text, honest) in files.items():
        path = folder / (name.split(" ")[0].replace("-", "_") + f"_{kind}.py")
        path.write_text(text)
        if name.startswith("side-stream") and device != "cuda":
            rows.append({"attack": name, "as_written": "skipped (needs a GPU)", "static_off": "skipped (needs a GPU)"})
            continue
        row = {"attack": name}
        for label, static in (("as_written", real_static), ("static_off", lambda source, filename="k": [])):
            if clock.left() < 60:
                row[label] = "skipped (budget)"
                continue
            integrity.static_findings = static
            try:
                with Evaluator(kind, device=device, timeout_s=300, baselines=False) as ev:
                    result = ev.evaluate(path)
                    honest_us = None
                    if honest and result.verdict == "pass":
                        honest_us = ev.evaluate(KERNELS_DIR / f"{honest}.py").score_us
            finally:
                integrity.static_findings = real_static
            rules = sorted({f.rule for f in result.integrity})
            if result.verdict != "pass":
                verdict = f"caught: {result.verdict} at {result.failed_stage}" + (f" ({', '.join(rules)})" if rules else "")
            elif honest_us is not None and result.score_us is not None and result.score_us >= 0.9 * honest_us:
                verdict = f"caught: no gain ({result.score_us:.1f} us vs honest {honest_us:.1f} us)"
            elif honest_us is not None:
                verdict = f"NOT caught: {result.score_us:.1f} us vs honest {honest_us:.1f} us"
            else:
                verdict = "NOT caught: passed"
            row[label] = verdict
            log.append({"step": "attack", "attack": name, "static": label, "verdict": result.verdict,
                        "rules": rules, "message": result.message[:400], "score_us": result.score_us,
                        "honest_us": honest_us})
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=900.0, help="seconds for the whole run")
    ap.add_argument("--loop-budget", default="90s")
    ap.add_argument("--repeats", type=int, default=2, help="warm evaluations after the first, per starter")
    ap.add_argument("--cpu-smoke", action="store_true", help="CPU (Triton interpreter), tiny settings")
    ap.add_argument("--skip-attacks", action="store_true", help="part (a) only")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        device, loop_budget, repeats = "cpu", "20s", 1
    else:
        device, loop_budget, repeats = "cuda", args.loop_budget, args.repeats
    clock = Clock(args.budget)
    log: list = []
    cost = evaluation_cost(device, repeats, clock, log)
    loop = loop_rate(device, loop_budget, out, clock, log)
    attack_rows = [] if args.skip_attacks else attacks(device, out, clock, log, args.cpu_smoke)
    import autokernel

    record = {"device": device, "autokernel": getattr(autokernel, "__file__", ""), "evaluation": cost, "loop": loop,
              "attacks": attack_rows, "log": log, "wall_s": time.perf_counter() - clock.start}
    (out / "judge_gpu.json").write_text(json.dumps(record, indent=1, default=str))
    lines = [f"## judge cost ({device}; autokernel from {record['autokernel']})", "",
             "| starter | first evaluation (s) | warm evaluation, median (s) | n | verdicts |", "|---|---|---|---|---|"]
    for r in cost:
        if "skipped" in r:
            lines.append(f"| {r['kind']} | skipped ({r['skipped']}) | | | |")
        else:
            lines.append(f"| {r['kind']} | {fmt(r['first_s'])} | {fmt(r['warm_median_s'])} | {r['n']} | "
                         f"{', '.join(r['verdicts'])} |")
    lines += ["", "| loop (optimize softmax) | experiments | wall (s) | experiments/hour |", "|---|---|---|---|"]
    if "skipped" in loop:
        lines.append(f"| {loop_budget} | skipped ({loop['skipped']}) | | |")
    else:
        lines.append(f"| {loop_budget} (rc {loop['rc']}) | {loop['experiments']} | {fmt(loop['wall_s'], '.1f')} | "
                     f"{fmt(loop['per_hour'], '.0f')} |")
    if attack_rows:
        lines += ["", "| GPU attack | as written | static checks off |", "|---|---|---|"]
        for r in attack_rows:
            lines.append(f"| {r['attack']} | {r.get('as_written', '-')} | {r.get('static_off', '-')} |")
    text = "\n".join(lines) + "\n"
    (out / "judge_gpu.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
