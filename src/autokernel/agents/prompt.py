"""The prompt: what an expert would look at before the next experiment.

``build_messages(context) -> (system, user)`` for chat models; ``build_command_prompt`` for an
external coding agent working in the problem directory.  The user message has, in order: the
problem, the floors and where the current best stands, the current best kernel, the recent
experiments, the last failure, the playbook sections chosen for the situation
(``select_sections``), and the reply format.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..problems.base import Shape, dtype_name, format_shape
from .base import Context
from .parse import EDIT_FORMAT

PLAYBOOK_PATH = Path(__file__).resolve().parent / "program.md"
HISTORY_ROWS = 12
MAX_FAILURE_CHARS = 2500

MEMORY_BOUND_KINDS = {"softmax", "layernorm", "rmsnorm", "swiglu", "cross_entropy", "rotary", "rotary_interleaved", "rotary_pairs_to_halves", "reduce",
                      "add_rmsnorm", "add_layernorm", "gelu", "geglu", "swiglu_packed", "geglu_packed",
                      "embedding", "rotary_table", "relative_position_bias", "xielu",
                      "shifted_windows", "window_bias", "selective_scan",
                      "causal_conv1d"}
COMPUTE_BOUND_KINDS = {"matmul", "attention", "attention_masked", "attention_rotary", "attention_softcap", "attention_sinks",
                       "fused_mlp", "linear_gelu", "linear_relu", "linear_relu2"}
FAILED = {"incorrect", "timeout", "crash", "rejected"}
_HEADING = re.compile(r"^(#{2,3}) \[([A-Za-z0-9_-]+)\]", re.MULTILINE)

SYSTEM = """You are an expert GPU kernel engineer. You make one Triton kernel file faster while \
keeping it exactly correct. A strict harness judges every file you send: correctness stages \
(smoke, sweep, numerics, determinism, edges, held-out shapes), integrity checks, then timing on \
the target shapes against the current best. Only a correct file that is measurably faster is \
kept; everything else is reverted and you are told why. Propose one idea per reply."""


# ------------------------------------------------------------------ playbook
def load_playbook(text: str | None = None) -> dict[str, str]:
    """Sections of the playbook by tag (``## [id] Title`` or ``### [id] Title``), in file
    order.  A ``##`` section's text stops at the next tagged heading of any level."""
    if not text:
        text = PLAYBOOK_PATH.read_text(encoding="utf-8")
    marks = list(_HEADING.finditer(text))
    return {m.group(2): text[m.start(): marks[i + 1].start() if i + 1 < len(marks) else len(text)].strip()
            for i, m in enumerate(marks)}


@dataclass
class Situation:
    bound: str  # "memory" | "compute"
    pct_roofline: float | None
    experiments: int  # experiments so far on this problem (not counting the baseline)
    failures_in_a_row: int  # trailing failed experiments
    since_keep: int  # trailing experiments without a keep


def assess(context: Context) -> Situation:
    rows = [r for r in context.history if r.get("status") != "baseline"]
    failures = 0
    for row in reversed(rows):
        if row.get("status") not in FAILED:
            break
        failures += 1
    since_keep = 0
    for row in reversed(rows):
        if row.get("status") == "keep":
            break
        since_keep += 1
    best = context.best
    pct = best.pct_roofline if best is not None and best.correct else None
    return Situation(bound_of(context), pct, len(rows), failures, since_keep)


def bound_of(context: Context) -> str:
    kind = context.problem.kind
    if kind in MEMORY_BOUND_KINDS:
        return "memory"
    if kind in COMPUTE_BOUND_KINDS:
        return "compute"
    shapes, dtype = target_shapes(context)
    try:
        shape = shapes[0]
        intensity = context.problem.flops(shape) / max(context.problem.bytes(shape, dtype), 1.0)
    except Exception:
        return "memory"
    return "compute" if intensity > 60 else "memory"


def select_sections(context: Context, playbook: dict[str, str]) -> tuple[list[str], str]:
    """Which playbook sections fit, and a one-line reason."""
    s = assess(context)
    chosen: list[str] = ["choose"]
    reasons: list[str] = []
    last_status = (context.last_failure or {}).get("status")
    if s.failures_in_a_row >= 2 or last_status in ("incorrect", "crash", "timeout"):
        chosen.append("correctness")
        reasons.append(f"{s.failures_in_a_row} failed experiment(s) in a row")
    if s.pct_roofline is None:
        chosen += ["tier1", "tier2" if s.bound == "memory" else "tier3"]
        reasons.append("roofline position unknown")
    elif s.pct_roofline < 50:
        chosen += ["tier2", "tier4"] if s.bound == "memory" else ["tier3", "tier4"]
        reasons.append(f"{s.pct_roofline:.0f}% of roofline: structural gap")
    elif s.pct_roofline < 80:
        chosen += ["tier1", "tier2" if s.bound == "memory" else "tier3", "tier4"]
        reasons.append(f"{s.pct_roofline:.0f}% of roofline: sound structure, tune and trim")
    else:
        chosen += ["tier1", "tier5"]
        reasons.append(f"{s.pct_roofline:.0f}% of roofline: last details")
    if s.since_keep >= 5:
        chosen += ["tier4", "tier5"]
        reasons.append(f"{s.since_keep} experiments without a keep: change the structure")
    if s.bound == "compute" and "tier5" not in chosen:
        chosen.append("tier5")
    chosen.append("tier6")
    if context.problem.kind in playbook:
        chosen.append(context.problem.kind)
    order = list(playbook)
    unique = sorted({c for c in chosen if c in playbook}, key=order.index)
    return unique, "; ".join(reasons)


# ------------------------------------------------------------------ sections of the prompt
def target_shapes(context: Context) -> tuple[list[Shape], torch.dtype]:
    extra = context.extra or {}
    dtype = extra.get("dtype")
    if isinstance(dtype, str):
        from ..problems.base import parse_dtype

        dtype = parse_dtype(dtype)
    if dtype is None:
        dtype = context.problem.dtypes[0]
    shapes = extra.get("shapes")
    if not shapes and context.best is not None and context.best.timings:
        shapes = _unique([t.shape for t in context.best.timings])
    if not shapes:
        shapes = list(context.problem.shapes_for(context.device))
    return [dict(s) for s in shapes], dtype


def _shape_text(p, shape: dict) -> str:
    """A target shape in ``dims`` order, an optional dimension it has named (``...x1,Dv=128``)."""
    extra = [f"{d}={shape[d]}" for d in p.optional_dims if d in shape]
    return ",".join([format_shape({d: shape[d] for d in p.dims})] + extra)


def problem_section(context: Context) -> str:
    p = context.problem
    shapes, dtype = target_shapes(context)
    lines = [
        "## Problem",
        f"- kind: {p.kind}" + (f" (from {context.problem_spec})" if context.problem_spec != p.kind else ""),
        f"- what it computes: {p.description}",
        f"- signature: `{p.signature}`",
        f"- dimensions: {', '.join(p.dims)}" + (f" (and, where a shape has it, {', '.join(p.optional_dims)})"
                                                 if p.optional_dims else ""),
        f"- target shapes ({'x'.join(p.dims)}): {', '.join(_shape_text(p, s) for s in shapes)}",
        (f"- dtype: {dtype_name(dtype)}" if (context.extra or {}).get("dtype")
         else f"- dtypes (all must be correct): {', '.join(dtype_name(d) for d in p.dtypes)}"),
        f"- device: {context.device}",
    ]
    return "\n".join(lines)


def standing_section(context: Context) -> str:
    """Floors per shape and where the current best stands."""
    shapes, dtype = target_shapes(context)
    best = context.best
    timing = {format_shape(t.shape): t for t in (best.timings if best else [])}
    lines = ["## Floors and where the current best stands"]
    interp = best is not None and best.timing_kind == "interpreter"
    if interp:
        lines.append("Timings come from the Triton interpreter on CPU: they say nothing about GPU speed. "
                     "Judge ideas by what they would do on a GPU; correctness is what is really checked here.")
    lines.append("| shape | MB moved | GFLOP | flop/byte | floor µs | best µs | % roofline | vs eager |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        key = format_shape(shape)
        mb = _safe(lambda: context.problem.bytes(shape, dtype) / 1e6)
        gflop = _safe(lambda: context.problem.flops(shape) / 1e9)
        intensity = mb and gflop is not None and gflop * 1e9 / (mb * 1e6)
        t = timing.get(key)
        lines.append("| " + " | ".join([
            key, _num(mb), _num(gflop), _num(intensity or None),
            _num(t.floor_us if t else None), _num(t.latency_us if t else None),
            _num(t.pct_roofline if t else None), _x(t.speedup_vs_eager if t else None)]) + " |")
    if best is None:
        lines.append("The current kernel has not been evaluated yet.")
    elif not best.correct:
        lines.append(f"The current kernel is NOT correct ({best.verdict}, stage {best.failed_stage}): "
                     f"{_clip(best.message, 400)}. Making it correct comes first.")
    else:
        parts = [f"score {_num(best.score_us)} µs (time-weighted over the shapes)"]
        if best.pct_roofline is not None:
            parts.append(f"{best.pct_roofline:.1f}% of roofline")
        if best.speedup_vs_eager:
            parts.append(f"{best.speedup_vs_eager:.2f}x vs eager PyTorch")
        if best.speedup_vs_compile:
            parts.append(f"{best.speedup_vs_compile:.2f}x vs torch.compile")
        if context.start is not None and context.start.score_us and best.score_us:
            parts.append(f"{context.start.score_us / best.score_us:.2f}x vs the starting kernel")
        lines.append("Current best: " + ", ".join(parts) + ".")
    return "\n".join(lines)


def kernel_section(context: Context) -> str:
    return f"## Current best kernel (kernel.py)\n\n```python\n{context.best_source.rstrip()}\n```"


def history_section(context: Context, limit: int = HISTORY_ROWS) -> str:
    rows = context.history[-limit:]
    if not rows:
        return "## Recent experiments\nNone yet: this is the first experiment on this problem."
    skipped = len(context.history) - len(rows)
    lines = ["## Recent experiments" + (f" (last {len(rows)} of {len(context.history)})" if skipped else ""),
             "| # | status | failed stage | score µs | % roofline | vs start | description |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join([
            r.get("experiment", ""), r.get("status", ""), r.get("failed_stage", ""),
            r.get("latency_us", ""), r.get("pct_roofline", ""), r.get("speedup_vs_start", ""),
            _clip(r.get("description", ""), 90).replace("|", "/")]) + " |")
    return "\n".join(lines)


def failure_section(context: Context) -> str:
    f = context.last_failure
    if not f:
        return ""
    lines = ["## Last failure (the file was reverted; the kernel above is the last kept one)",
             f"- experiment: {_clip(f.get('description', ''), 200)}",
             f"- status: {f.get('status', '')}" + (f", failed stage: {f['stage']}" if f.get("stage") else ""),
             "- message:", "```", _clip_block(f.get("message", ""), MAX_FAILURE_CHARS), "```"]
    return "\n".join(lines)


def playbook_section(context: Context) -> str:
    playbook = load_playbook(context.playbook or None)
    if not playbook:  # a user playbook without tags: include it whole
        return "## Playbook\n" + _clip_block(context.playbook, 12000)
    chosen, why = select_sections(context, playbook)
    body = "\n\n".join(_demote(playbook[c]) for c in chosen if c not in ("rules", "by-hand"))
    return f"## Playbook (chosen for this situation: {why})\n\n{body}"


def rules_text(context: Context) -> str:
    playbook = load_playbook(context.playbook or None)
    return _demote(playbook["rules"]) if "rules" in playbook else ""


def reply_format() -> str:
    return f"""## Your reply
Propose ONE change to the current best kernel. Reply with:
1. A first line `DESCRIPTION: <what you changed and why, under 100 characters>`.
2. Then EITHER the whole new kernel file in a single ```python fenced block,
   OR one or more edit blocks in exactly this format (no fence needed):

{EDIT_FORMAT}

   The SEARCH lines must match the current kernel file exactly (indentation included) and occur
   once in it; blocks are applied in order. Use edits for small changes, the whole file for
   restructuring. Keep `kernel_fn`'s signature and the literal KNOBS / KNOB_SPACE dicts."""


# ------------------------------------------------------------------ whole prompts
def build_messages(context: Context) -> tuple[str, str]:
    system = SYSTEM + "\n\n" + rules_text(context)
    parts = [f"# Experiment {context.experiment} on problem `{context.problem.kind}`",
             problem_section(context), standing_section(context), kernel_section(context),
             history_section(context), failure_section(context), playbook_section(context),
             reply_format()]
    return system.strip(), "\n\n".join(p for p in parts if p)


def build_command_prompt(context: Context, bench_spec: str) -> str:
    """One file for an external coding agent that edits ``kernel.py`` in place."""
    system, user = build_messages(context)
    user = user.replace(reply_format(), "")
    playbook = load_playbook(context.playbook or None)
    by_hand = _demote(playbook.get("by-hand", "")).replace("SPEC", bench_spec)
    shapes, dtype = target_shapes(context)
    example = f"autokernel bench kernel.py --problem {bench_spec} --shape {format_shape(shapes[0])} --dtype {dtype_name(dtype)}" if shapes else ""
    task = f"""## Your task
You are in `{context.problem_dir}`. Edit `kernel.py` in place with ONE idea that makes it faster
while keeping it correct. Check it with:

    autokernel bench kernel.py --problem {bench_spec}
{('    ' + example + '   # one case, quickly') if example else ''}

Do not commit and do not change any other file: autokernel evaluates kernel.py itself when you
exit, keeps or reverts it, and undoes everything else. Print, as your very last line, one line
describing the change (under 100 characters).

{by_hand}"""
    return f"{system}\n\n{user.rstrip()}\n\n{task.strip()}\n"


# ------------------------------------------------------------------ formatting helpers
def _demote(section: str) -> str:
    """Drop the machine tag from headings and move them one level down inside the prompt."""
    return re.sub(r"^(#{2,3}) \[[A-Za-z0-9_-]+\] ", lambda m: "#" + m.group(1) + " ", section, flags=re.MULTILINE)


def _unique(shapes: list[Shape]) -> list[Shape]:
    seen, out = set(), []
    for s in shapes:
        key = tuple(s.items())
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def _safe(fn):
    try:
        value = float(fn())
    except Exception:
        return None
    return value if math.isfinite(value) else None


def _num(value) -> str:
    if value is None:
        return "—"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _x(value) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip_block(text: str, limit: int) -> str:
    text = str(text).strip().replace("```", "'''")
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "\n[… cut …]\n" + text[-half:]

