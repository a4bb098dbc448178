"""Where a patched model's time goes on a GPU, next to the original: per problem and per kernel.

    PYTHONPATH=src python benchmarks/model_profile_gpu.py --out DIR [--models llama,hf:gpt2,hf:bert]
    PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/model_profile_gpu.py --out DIR --cpu-smoke

For each model (the shapes and starters of models_gpu.py, no torch.compile): one
``autokernel.verify`` with its time breakdown before/after (per problem), then torch.profiler
over a few forwards of the original and of the patched model: wall time per forward, GPU
kernel time per forward, kernel launches per forward, and the kernels that take the most time.
A model whose wall time is far above its kernel time is bound by the host (launches, Python).
Writes DIR/<model>.md; prints everything.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from models_gpu import CPU_MODELS, GPU_MODELS, starters_workdir  # noqa: E402


GEMM_MARKS = ("gemm", "cutlass", "xmma", "nvjet", "triton_tem", "matmul", "_mm_", "cublas", "wgmma")
ATTENTION_MARKS = ("flash", "fmha", "attention", "attn", "sdpa", "cudnn")


def kernel_class(name: str) -> str:
    """GEMM, attention or other, from a GPU kernel's name (cuBLAS, CUTLASS, inductor's templates,
    our own matmul and attention kernels)."""
    low = name.lower()
    if any(mark in low for mark in ATTENTION_MARKS):
        return "attention"
    if any(mark in low for mark in GEMM_MARKS):
        return "GEMM"
    return "other"


def profile_forwards(model, inputs, gpu: bool, iters: int) -> tuple[float, float, int, str, dict]:
    """(wall ms per forward, kernel ms per forward, launches per forward, top-kernel table,
    kernel ms per forward by class)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sync = torch.cuda.synchronize if gpu else (lambda: None)
    with torch.inference_mode():
        for _ in range(3):
            model(*inputs)
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            model(*inputs)
        sync()
        wall_ms = (time.perf_counter() - t0) * 1e3 / iters
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
        with profile(activities=activities) as prof:
            for _ in range(iters):
                model(*inputs)
            sync()
    kernels = [e for e in prof.events() if getattr(e, "device_type", None) is not None
               and str(e.device_type).endswith("CUDA")]
    def us(e) -> float:
        return e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total

    kernel_ms = sum(us(e) for e in kernels) / 1e3 / iters
    classes: dict[str, float] = {}
    for e in kernels:
        classes[kernel_class(e.name)] = classes.get(kernel_class(e.name), 0.0) + us(e) / 1e3 / iters
    sort = "self_cuda_time_total" if gpu else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=22, max_name_column_width=70)
    return wall_ms, kernel_ms, len(kernels) // iters, table, classes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", default="", help="comma-separated subset of models_gpu.py's models")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="also profile the patched model in CUDA-graph mode (and name the ops its capture left out)")
    ap.add_argument("--compiled", action="store_true",
                    help="also profile torch.compile of the original (max-autotune-no-cudagraphs): where its time "
                         "goes against the patched model's, GEMMs apart")
    ap.add_argument("--compile-mode", default="max-autotune-no-cudagraphs",
                    help="torch.compile mode for --compiled (default: max-autotune-no-cudagraphs)")
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args(argv)
    import torch

    gpu = not args.cpu_smoke
    if gpu and not torch.cuda.is_available():
        print("model_profile_gpu.py: no GPU here (use --cpu-smoke to check the script on CPU)", file=sys.stderr)
        return 2
    from autokernel.integrate import apply
    from autokernel.models import load_model
    from autokernel.report import breakdown_markdown
    from autokernel.verify import verify

    args.out.mkdir(parents=True, exist_ok=True)
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    rows = []
    for spec, config, shape in (GPU_MODELS if gpu else CPU_MODELS):
        if wanted and spec not in wanted:
            continue
        print(f"== {spec} {shape}", flush=True)
        # in CUDA-graph mode the plan is the captured forward's (attention with the mask transformers
        # builds while a stream captures), so the graphed model gets the ops it runs
        wd = starters_workdir(args.out / "workdirs", spec, config, shape, gpu, captured=args.cuda_graphs)
        v = verify(wd, seeds=(0,), compile=False, iters=20 if gpu else 2, log=print, breakdown=True,
                   breakdown_iters=None if gpu else 1)
        text = [f"# {spec} {shape}", "", *(breakdown_markdown(v.breakdown) if v.breakdown else ["(no breakdown)"])]
        loaded = load_model(spec, dtype=torch.bfloat16 if gpu else torch.float32, device="cuda" if gpu else "cpu",
                            input_shape=shape, config_overrides=config)
        original = loaded.model.eval()
        patched = apply(original, wd)
        inputs = loaded.make_inputs(0)
        models = [("original", original), ("patched", patched)]
        if args.cuda_graphs and gpu:
            graphed = apply(original, wd, cuda_graphs=True)
            models.append(("patched, CUDA graph", graphed))
        if args.compiled:
            mode = args.compile_mode if gpu else None
            models.append(("torch.compile of the original", torch.compile(original, mode=mode,
                                                                          backend="inductor" if gpu else "aot_eager")))
        for name, model in models:
            wall, kernel, launches, table, classes = profile_forwards(model, inputs, gpu, args.iters if gpu else 1)
            rows.append((spec, name, wall, kernel, launches, classes))
            text += ["", f"## {name}: {wall:.3f} ms wall, {kernel:.3f} ms kernels, {launches} launches per forward",
                     "", "kernel ms per forward by class: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(classes.items())),
                     "", "```", table, "```"]
        if args.cuda_graphs and gpu:
            text += ["", f"ops the capture left out: {graphed.capture_fallbacks or 'none'}"]
        (args.out / f"{spec.replace(':', '_')}.md").write_text("\n".join(text) + "\n")
        print("\n".join(text), flush=True)
    print("\n| model | which | wall ms / forward | kernel ms / forward | GEMM ms | attention ms | other ms "
          "| launches / forward |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for spec, name, wall, kernel, launches, classes in rows:
        print(f"| {spec} | {name} | {wall:.3f} | {kernel:.3f} | {classes.get('GEMM', 0.0):.3f} | "
              f"{classes.get('attention', 0.0):.3f} | {classes.get('other', 0.0):.3f} | {launches} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
