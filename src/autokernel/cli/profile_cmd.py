"""`autokernel profile`: profile a model, print where its time goes, write plan.json."""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

import typer

from .common import check_writable_dir, config_overrides, fail_usage, says_when_interrupted


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)


def profile(
    model: str = typer.Option(..., "--model", help="path/to/file.py:ClassName, llama, gpt2, bert, or hf:ARCH"),
    input_shape: Optional[str] = typer.Option(None, "--input-shape", help="token batch BxS (e.g. 1x1024), or a float input's shape"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16, fp16 or fp32 (default bf16 on GPU, fp32 on CPU, as `run`)"),
    device: str = typer.Option("auto", "--device", help="auto, cuda or cpu"),
    config: Optional[List[str]] = typer.Option(None, "--config", help="model config overrides: key=value[,key=value] (repeatable; a list in brackets: depths=[2,2]; a JSON object in braces)"),
    out: Path = typer.Option(Path("plan.json"), "--out", help="where to write the plan"),
    fused_mlp: bool = typer.Option(False, "--fused-mlp", help="plan SwiGLU MLPs as one fused_mlp problem"),
    fused_rotary: bool = typer.Option(False, "--fused-rotary", help="plan rotary on q and k followed by attention as one attention_rotary problem"),
    warmup: int = typer.Option(2, "--warmup", min=0, help="untimed forward passes first"),
    iters: int = typer.Option(3, "--iters", min=1, help="profiled forward passes"),
    padded: bool = typer.Option(False, "--padded", help="hf: token models: a padded batch (token ids and an attention_mask with rows of different lengths)"),
    as_captured: bool = typer.Option(False, "--as-captured", help="profile the forward as it runs while a CUDA stream captures it (for models run with --cuda-graphs: transformers then builds the whole attention mask)"),
) -> None:
    """Profile a model and write plan.json: the kernel problems it is made of, with real shapes."""
    from ..fusion_notes import unfused_flags
    from ..models import ModelSpecError, load_model, parse_input_shape
    from ..plan import save_plan
    from ..problems.base import parse_dtype
    from ..profiler import profile_model

    device = resolve_device(device)
    try:
        torch_dtype = parse_dtype(dtype or default_dtype(device))
    except ValueError as exc:
        fail_usage(str(exc))
    if out.exists() and out.is_dir():
        fail_usage(f"--out {out} is a directory; give a file path such as {out / 'plan.json'}")
    check_writable_dir(out.parent, "--out", file=out)
    overrides = config_overrides(config)
    with says_when_interrupted(f"no plan was written to {out}"):
        try:
            loaded = load_model(model, dtype=torch_dtype, device=device, input_shape=parse_input_shape(input_shape),
                                config_overrides=overrides or None, padded=padded)
        except ModelSpecError as exc:
            fail_usage(str(exc))
        plan = profile_model(loaded, device=device, dtype=torch_dtype, warmup=warmup, iters=iters, fuse_mlp=fused_mlp,
                             captured=as_captured, fuse_rotary=fused_rotary)
    plan.config, plan.padded = overrides, padded
    out.parent.mkdir(parents=True, exist_ok=True)
    save_plan(plan, out)
    print_plan(plan, loaded.description)
    for note in unfused_flags(plan, fuse_rotary=fused_rotary, fuse_mlp=fused_mlp):
        typer.echo(note)
    typer.echo(f"wrote {out}")


def default_dtype(device: str) -> str:
    """The model dtype when none is given: bf16 on a GPU, fp32 on CPU (the same as `run`)."""
    return "bf16" if str(device).startswith("cuda") else "fp32"


def resolve_device(device: str) -> str:
    from ..hardware import resolve_device as resolve

    try:
        return resolve(device.strip().lower())
    except ValueError as exc:
        fail_usage(str(exc))


def format_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} us"


def summarize_modules(names: list[str], limit: int = 3) -> str:
    """``layers.0.attn``, ``layers.1.attn`` -> ``layers.*.attn``."""
    patterns: list[str] = []
    for name in names:
        pattern = re.sub(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)", "*", name)
        if pattern not in patterns:
            patterns.append(pattern)
    shown = ", ".join(patterns[:limit])
    return shown + (f" (+{len(patterns) - limit})" if len(patterns) > limit else "")


def shape_legend(plan) -> str:
    """What the numbers of each kind's shapes are (``autokernel problems KIND`` says more)."""
    from ..recognize import KIND_DIMS, OPTIONAL_KIND_DIMS

    kinds = sorted({p.kind for p in plan.problems if p.kind in KIND_DIMS and p.shapes})

    def dims(kind: str) -> tuple[str, ...]:
        had = {d for p in plan.problems if p.kind == kind for s in p.shapes for d in s}
        return KIND_DIMS[kind] + tuple(f"[{d}]" for d in OPTIONAL_KIND_DIMS.get(kind, ()) if d in had)

    legend = ", ".join(f"{k} {'x'.join(dims(k))}" for k in kinds)
    note = "; [a dim]: where a shape has it" if "[" in legend else ""
    return f"shapes: {legend} (`autokernel problems KIND` explains a kind{note})" if kinds else ""


def print_plan(plan, description: str = "") -> None:
    from ..problems.base import format_shape

    from rich.console import Console

    from ..report import compact_table

    console = Console(highlight=False)
    time_kind = "GPU kernel time" if plan.time_kind == "gpu" else "CPU op time (not GPU performance)"
    title = f"{plan.model} · {plan.dtype} · input {'x'.join(map(str, plan.input_shape))} · {plan.device_name or plan.device}"
    table = compact_table(title, [("problem", "left"), ("kind", "left"), ("shapes", "left"), ("calls", "right"),
                                  ("time", "right"), ("share", "right")])
    table.caption = f"{time_kind}, per forward pass: {format_us(plan.total_time_us)}"
    for p in plan.problems:
        shapes = ", ".join(format_shape(s) for s in p.shapes[:3])
        if len(p.shapes) > 3:
            shapes += f" (+{len(p.shapes) - 3})"
        table.add_row(p.name, p.kind + ("" if p.supported else " (unsupported)"), shapes, str(sum(p.calls)),
                      format_us(p.time_us), f"{100 * p.fraction:.1f}%")
    if description:
        console.print(description, markup=False)  # it holds the user's settings and "[mixture of experts: ...]"
    console.print(table)
    console.print(shape_legend(plan), markup=False)
    not_covered = plan.not_covered
    uncovered = sum(u.fraction for u in not_covered)
    top = ", ".join(f"{u.name} {100 * u.fraction:.1f}%" for u in not_covered[:4])
    console.print(f"covered by supported problems: {100 * plan.covered_fraction:.1f}%   "
                  f"uncovered: {100 * uncovered:.1f}%" + (f" ({top})" if top else ""), markup=False)
    for p in plan.problems:
        if not p.supported and p.note:
            console.print(f"{p.name} is not optimized: {p.note}", markup=False)
    if not plan.supported:
        console.print("nothing in this model is a kind autokernel supports: the plan has no problems to optimize")
