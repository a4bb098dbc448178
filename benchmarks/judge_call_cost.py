"""The judge's host time per judged call: the worker's call path (``worker_main._State.call``:
the draw, the watch, the checks after the call, the digest, the collection) and a real
evaluation's timed calls.

    PYTHONPATH=src python benchmarks/judge_call_cost.py                  # CPU (Triton interpreter)
    PYTHONPATH=src python benchmarks/judge_call_cost.py --device cuda    # on a GPU
    ... --kinds softmax,rmsnorm --requests 6 --calls 40 --profile 40 --evaluations 2

Compare two trees by running this script with each one's ``src`` on PYTHONPATH, alternately
(a shared machine's load moves the numbers by 2x: run each several times).

1. **worker**: the worker's request handler in this process (as the worker process runs it,
   audit hook included), the kind's starter loaded, ``--requests`` timed requests of ``--calls``
   drawn calls at the kind's smallest edge shape (CPU) or the first GPU shape.  Host time per
   call = the request's wall time / calls minus the kernel's own time: on the CPU the judge's
   measured times of the request's calls (the interpreter runs the kernel in the timed window);
   on a GPU the wall time of a bare call of the same ``kernel_fn`` (launch, then synchronize),
   measured here.  The median over the requests after the first is reported.
   With ``--profile N``: the top N cumulative entries of a cProfile of the requests.
2. **evaluation** (``--evaluations`` > 0): ``Evaluator.evaluate`` of the starter at the same
   shape, the timing phase's wall time per timed call (the worker process, the parent's checks
   of the sampled calls and the round trips together), warm (the first evaluation is dropped).

Prints one line per measurement and a JSON summary last.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import statistics
import sys
import time


PROFILER: list = []


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda")
    ap.add_argument("--kinds", default="rmsnorm,softmax")
    ap.add_argument("--requests", type=int, default=6, help="timed requests per kind (the first is a warm-up)")
    ap.add_argument("--calls", type=int, default=40, help="drawn calls per request")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile the worker's requests, print the top N cumulative entries")
    ap.add_argument("--evaluations", type=int, default=0,
                    help="also run this many Evaluator evaluations per kind (the first is dropped as cold)")
    ap.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def shape_of(problem, device: str) -> dict:
    if device.startswith("cuda"):
        return dict(problem.gpu_shapes[0])
    return dict(min(problem.edge_shapes_for(device), key=lambda s: math.prod(s.values())))


def bare_call_us(problem, fn, shape: dict, dtype, device: str, seeds) -> float:
    """The kernel's own time: one call of ``fn`` on drawn inputs, synchronized on a GPU (median)."""
    import torch

    walls = []
    for seed in seeds:
        args = problem.make_inputs(dict(shape), dtype, device, seed)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(walls[1:] if len(walls) > 1 else walls)


def worker_cost(state, kind: str, args) -> dict:
    """Timed requests on the in-process worker ``state``; host µs per call."""
    from autokernel.harness.stages import dtype_name
    from autokernel.problems.base import format_shape
    from autokernel.problems.registry import KERNELS_DIR, get_problem

    problem = get_problem(kind)
    dtype = problem.dtypes[0]
    shape = shape_of(problem, args.device)
    profiler = PROFILER[0] if PROFILER else None
    reply = state.handle("load", {"op": "load", "slot": kind, "path": str(KERNELS_DIR / f"{kind}.py"),
                                  "problem": kind})
    assert reply.get("ok"), reply
    # the outputs' declared shapes and dtypes, as every request of the judge's brings them
    outs = problem.reference(*problem.make_inputs(dict(shape), dtype, args.device, 1))
    outs = outs if isinstance(outs, tuple) else (outs,)
    expected = [(list(o.shape), str(o.dtype)) for o in outs]
    del outs
    seed = iter(range(10 ** 6, 2 * 10 ** 6))
    per_call, kernel_us = [], []
    for r in range(args.requests):
        message = {"op": "call", "slot": kind, "shape": shape, "dtype": dtype, "sets": None,
                   "draw": [next(seed) for _ in range(args.calls)], "expected": expected,
                   "poison": float("nan"), "require_launch": problem.forbidden_ops is None}
        if profiler is not None and r == 1:
            profiler.clear()  # the load and the warm-up request out
        t0 = time.perf_counter()
        reply = state.handle("call", message)
        wall = time.perf_counter() - t0
        assert "error" not in reply and not reply.get("findings"), reply
        if r > 0:  # the first request compiles and warms up
            per_call.append(wall * 1e6 / args.calls)
            kernel_us.append(sum(reply["times_us"]) / args.calls)
    fn = state.kernel(kind, shape, dtype)
    if args.device.startswith("cuda"):
        own = bare_call_us(problem, fn, shape, dtype, args.device, range(20))
        host = [p - own for p in per_call]
    else:  # each request's own calls' times (the interpreter's time varies with the machine's load)
        own = statistics.median(kernel_us)
        host = [p - k for p, k in zip(per_call, kernel_us)]
    result = {"kind": kind, "shape": shape, "dtype": dtype_name(dtype), "calls": args.calls * (args.requests - 1),
              "wall_per_call_us": statistics.median(per_call), "kernel_us": own,
              "host_per_call_us": statistics.median(host), "host_per_call_spread_us": [min(host), max(host)]}
    print(f"worker {kind} {format_shape(shape)} {dtype_name(dtype)}: {result['host_per_call_us']:.0f} us host a call "
          f"(least {min(host):.0f}) "
          f"(wall {result['wall_per_call_us']:.0f} us - kernel {own:.0f} us; requests "
          f"{', '.join(f'{h:.0f}' for h in host)})", flush=True)
    if profiler is not None:
        profiler.disable()
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("cumulative").print_stats("autokernel|torch|built-in", args.profile)
        print(stream.getvalue(), flush=True)
        profiler.clear()
        profiler.enable()
    return result


def evaluation_cost(kind: str, args) -> dict:
    from autokernel.harness import Evaluator
    from autokernel.problems.registry import KERNELS_DIR, get_problem

    problem = get_problem(kind)
    shape = shape_of(problem, args.device)
    runs = []
    with Evaluator(kind, device=args.device, shapes=[shape], timeout_s=300) as evaluator:
        for i in range(args.evaluations):
            evaluator._calls_timed = 0
            ev = evaluator.evaluate(KERNELS_DIR / f"{kind}.py")
            assert ev.verdict == "pass", ev.message
            calls = evaluator._calls_timed
            per = (ev.phases.get("timing", 0.0) + ev.phases.get("timing_checks", 0.0)) * 1e6 / max(1, calls)
            print(f"evaluation {kind} #{i}: {ev.wall_s:.2f} s, phases {ev.phases}, {calls} timed calls, "
                  f"{per:.0f} us a timed call (timing phase / timed calls)", flush=True)
            runs.append({"wall_s": ev.wall_s, "phases": ev.phases, "timed_calls": calls, "per_timed_call_us": per})
    warm = runs[1:] or runs
    return {"kind": kind, "runs": runs, "warm_per_timed_call_us": statistics.median(r["per_timed_call_us"] for r in warm),
            "warm_wall_s": statistics.median(r["wall_s"] for r in warm)}


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.device.startswith("cuda"):
        os.environ["TRITON_INTERPRET"] = "1"
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    summary = {"device": args.device, "worker": [], "evaluation": []}
    if args.evaluations:  # then the worker part in a process of its own: a worker's rules refuse an evaluator's work
        for kind in kinds:
            summary["evaluation"].append(evaluation_cost(kind, args))
        import subprocess

        rest = [a for a in (argv if argv is not None else sys.argv[1:])]
        done = subprocess.run([sys.executable, __file__, *rest, "--evaluations", "0", "--json-only"],
                              capture_output=True, text=True)
        sys.stdout.write(done.stdout[:done.stdout.find("{")] if "{" in done.stdout else done.stdout)
        sys.stderr.write(done.stderr[-3000:] if done.returncode else "")
        summary["worker"] = json.loads(done.stdout[done.stdout.find("{"):])["worker"] if "{" in done.stdout else []
        print(json.dumps(summary, indent=1))
        return done.returncode
    from autokernel.harness import integrity, worker_main

    if args.profile:  # on from before the first load, as a profiled worker's (the hooks' baseline holds it)
        os.environ[worker_main.PROFILE_ENV] = os.environ.get("TMPDIR", "/tmp")
        PROFILER.append(cProfile.Profile())
        PROFILER[0].enable()
    state = worker_main._State(args.device)
    worker_main._import_problem_modules()
    state.fingerprint = integrity.FingerprintWatch()
    for kind in kinds:
        summary["worker"].append(worker_cost(state, kind, args))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
