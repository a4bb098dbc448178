"""Where a forward timed from idle loses time, per model: the GPU's clocks, the host's start, syncs.

    PYTHONPATH=src python benchmarks/from_idle_gpu.py --out DIR [--models llama] [--rounds 40]
    PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/from_idle_gpu.py --out DIR --cpu-smoke

For each model (the shapes and starters of models_gpu.py): the original, the patched model and
torch.compile of the original (max-autotune-no-cudagraphs), all built before anything is timed.
Each is timed in four ways, and the GPU's clocks are ramped up first:

* ``idle``: one forward between two events, the stream idle before it (``verify``'s way);
* ``spin``: the same with a GPU spin queued ahead, so the host has issued the forward before the
  GPU reaches it: the GPU's time alone;
* ``b2b``: 10 forwards back to back between two events, per forward (the host runs ahead);
* ``host``: wall time of the call on the host, no sync (issuing the forward).

``idle - spin`` is what the host's start costs a forward timed from idle.  The four ways run in
interleaved rounds (each model once a round, the order rotated), and then again as ``verify``
timed them before this session: each model in a block right after its own build, with no ramp
(``block``), to show what the old order measured.  Also: host syncs in one forward
(``torch.cuda.set_sync_debug_mode``), the host time to the first ``nn.Linear`` call, and a
cProfile of the patched model's forwards (top functions by own time) in DIR/<model>_host.txt.
Prints a markdown table last.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from models_gpu import CPU_MODELS, GPU_MODELS, starters_workdir  # noqa: E402

SPIN_CYCLES = 30_000_000  # ~15 ms at the H200's clocks: longer than any model's host issue here


def timed(fn, how: str, gpu: bool) -> float:
    """One measurement of ``fn`` (ms a forward) in the way ``how`` names."""
    import torch

    if not gpu:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    if how == "host":
        t0 = time.perf_counter()
        fn()
        host = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        return host
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if how == "spin":
        torch.cuda._sleep(SPIN_CYCLES)
    start.record()
    calls = 10 if how == "b2b" else 1
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def first_linear_ms(model, inputs) -> float | None:
    """Host ms from the call to the first ``nn.Linear``'s forward (the first GEMM's launch)."""
    import torch

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        return None
    seen: list[float] = []
    hooks = [m.register_forward_pre_hook(lambda *_: seen.append(time.perf_counter())) for m in linears]
    try:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(*inputs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    finally:
        for h in hooks:
            h.remove()
    return (seen[0] - t0) * 1e3 if seen else None


def syncs_in_forward(model, inputs) -> list[str]:
    """The host syncs one forward makes (their warnings' first lines)."""
    import torch

    if not torch.cuda.is_available():
        return []
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            model(*inputs)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return [str(w.message).splitlines()[0][:160] for w in caught if "synchroniz" in str(w.message).lower()]


def host_profile(model, inputs, calls: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        model(*inputs)
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    return f"{calls} forwards\n" + text.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", default="llama", help="comma-separated subset of llama,hf:gpt2,hf:bert")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args(argv)
    import torch

    gpu = not args.cpu_smoke
    if gpu and not torch.cuda.is_available():
        print("from_idle_gpu.py: no GPU here (use --cpu-smoke to check the script on CPU)", file=sys.stderr)
        return 2
    from autokernel.hardware import ramp_gpu_clocks
    from autokernel.integrate import apply
    from autokernel.models import load_model

    args.out.mkdir(parents=True, exist_ok=True)
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    rounds = args.rounds if gpu else 2
    table = []
    for spec, config, shape in (GPU_MODELS if gpu else CPU_MODELS):
        if spec not in wanted:
            continue
        print(f"== {spec} {shape}", flush=True)
        wd = starters_workdir(args.out / "workdirs", spec, config, shape, gpu)
        loaded = load_model(spec, dtype=torch.bfloat16 if gpu else torch.float32, device="cuda" if gpu else "cpu",
                            input_shape=shape, config_overrides=config)
        original = loaded.model.eval()
        patched = apply(original, wd)
        inputs = loaded.make_inputs(0)
        ramp = (lambda: ramp_gpu_clocks("cuda", 0.5)) if gpu else (lambda: None)
        with torch.inference_mode():
            models = {"original": lambda: original(*inputs), "patched": lambda: patched(*inputs)}
            block: dict[str, float] = {}
            for name in ("original", "patched"):  # verify's old order: each in its block, no ramp
                for _ in range(3):
                    models[name]()
                block[name] = statistics.median(timed(models[name], "idle", gpu) for _ in range(20))
            if gpu:
                t0 = time.perf_counter()
                compiled = torch.compile(original, mode="max-autotune-no-cudagraphs")
                compiled(*inputs)
                print(f"compiled in {time.perf_counter() - t0:.0f} s", flush=True)
                models["compile"] = lambda: compiled(*inputs)
                for _ in range(3):
                    models["compile"]()
                block["compile"] = statistics.median(timed(models["compile"], "idle", gpu) for _ in range(20))
            for fn in models.values():
                fn()
            ramp()
            ways = ("idle", "spin", "b2b", "host")
            samples = {(m, w): [] for m in models for w in ways}
            names = list(models)
            for r in range(rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for way in ways:
                    for name in order:
                        samples[(name, way)].append(timed(models[name], way, gpu))
            firsts = {name: first_linear_ms(m, inputs) for name, m in (("original", original), ("patched", patched))}
            syncs = {name: syncs_in_forward(m, inputs) for name, m in (("original", original), ("patched", patched))}
            profile_text = host_profile(patched, inputs, 10 if gpu else 1)
        (args.out / f"{spec.replace(':', '_')}_host.txt").write_text(profile_text)
        print(profile_text[:6000], flush=True)
        for name in names:
            med = {w: statistics.median(samples[(name, w)]) for w in ways}
            spread = statistics.pstdev(samples[(name, "idle")]) if len(samples[(name, "idle")]) > 1 else 0.0
            table.append((spec, name, block.get(name), med, spread, firsts.get(name), syncs.get(name)))
            for s in syncs.get(name) or []:
                print(f"  sync in {name}: {s}")
    print("\n| model | which | block ms (old order) | idle ms | idle sd | spin ms | idle - spin | b2b ms | host ms "
          "| host ms to 1st linear | syncs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for spec, name, blk, med, sd, first, syncs in table:
        f = (lambda x: "—" if x is None else f"{x:.3f}")
        print(f"| {spec} | {name} | {f(blk)} | {med['idle']:.3f} | {sd:.3f} | {med['spin']:.3f} | "
              f"{med['idle'] - med['spin']:.3f} | {med['b2b']:.3f} | {med['host']:.3f} | {f(first)} | "
              f"{'—' if syncs is None else len(syncs)} |")
    by = {(s, n): med for s, n, _, med, *_ in table}
    for spec in {s for s, *_ in table}:
        if (spec, "compile") in by:
            p, c = by[(spec, "patched")], by[(spec, "compile")]
            print(f"{spec}: patched / compile, interleaved: idle {c['idle'] / p['idle']:.3f}x, spin "
                  f"{c['spin'] / p['spin']:.3f}x, b2b {c['b2b'] / p['b2b']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
