"""The run's report (``autokernel report DIR``): ``report.md``, ``progress.png``,
``roofline.png`` in the workdir, and a table for the terminal.

Everything comes from the workdir's files: ``plan.json``, ``results.tsv``, ``run.json`` (when
the run was made by ``autokernel run``) and ``verify.json`` (when verified).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .loop import figures
from .integrate import KEPT_STATUSES, as_float, best_rows, kernel_path, load_workdir_plan, read_results
from .loop.results import timed_out
from .plan import Plan
from .problems.base import format_shape
from .verify_precision import clause as precision_clause
from .verify_records import Breakdown, VerifyResult, load_verify


@dataclass
class ProblemRow:
    name: str
    kind: str
    fraction: float
    experiments: int  # excluding the baseline
    kept: int
    start_us: float | None
    best_us: float | None
    speedup_vs_start: float | None
    speedup_vs_eager: float | None
    pct_roofline: float | None
    kernel: str  # path of the best kernel, relative to the workdir ("" when none)


@dataclass
class ReportData:
    workdir: Path
    plan: Plan
    rows: list[dict[str, str]]
    problems: list[ProblemRow]
    run: dict[str, Any] = field(default_factory=dict)
    verify: VerifyResult | None = None
    from_plan: bool = True  # False: a workspace of single problems (optimize --problem), no model
    run_name: str | None = None  # the run checked out (None: not a workspace's git repository)


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "—" if x is None else f"{x:{spec}}{suffix}"


def collect(workdir: str | Path) -> ReportData:
    workdir = Path(workdir)
    if (workdir / "plan.json").is_file() or not (workdir / "problems").is_dir():
        plan, from_plan = load_workdir_plan(workdir), True
    else:
        plan, from_plan = plan_from_problems(workdir), False
    rows = read_results(workdir)
    best = best_rows(rows)
    problems = []
    for p in plan.supported:
        mine = [r for r in rows if r.get("problem") == p.name]
        b = best.get(p.name, {})
        start_us, best_us = figures.start_and_best(mine)
        kpath = kernel_path(workdir, p.name)
        problems.append(ProblemRow(
            name=p.name, kind=p.kind, fraction=p.fraction,
            experiments=sum(1 for r in mine if r.get("status") != "baseline"),
            kept=sum(1 for r in mine if r.get("status") == "keep"),
            start_us=start_us, best_us=best_us, speedup_vs_start=figures.vs_start(start_us, best_us),
            speedup_vs_eager=as_float(b.get("speedup_vs_eager")) if plan.time_kind == "gpu" else None,
            pct_roofline=as_float(b.get("pct_roofline")),
            kernel=str(kpath.relative_to(workdir)) if kpath.is_file() else ""))
    run: dict[str, Any] = {}
    if (workdir / "run.json").is_file():
        try:
            run = json.loads((workdir / "run.json").read_text())
        except json.JSONDecodeError:
            run = {}
    from .loop.workspace import current_run_name

    return ReportData(workdir, plan, rows, problems, run, load_verify(workdir), from_plan=from_plan,
                      run_name=current_run_name(workdir))


def stuck_notes(data: ReportData) -> list[str]:
    """A line per reason naming the problems whose last rows are ``MAX_UNEVALUATED_IN_A_ROW`` or
    more proposals in a row that were no new kernel file (an LLM sending the current kernel
    back): the loop was done with them for that reason, which the problems table, counting those
    rows as experiments, hid."""
    from .loop.problem_run import MAX_UNEVALUATED_IN_A_ROW

    grouped: dict[str, list[str]] = {}
    for p in data.problems:
        mine = [r for r in data.rows if r.get("problem") == p.name and r.get("status") != "baseline"]
        run = 0
        for r in reversed(mine):
            if r.get("status") != "rejected" or r.get("failed_stage") or r.get("latency_us"):
                break
            run += 1
        if run < MAX_UNEVALUATED_IN_A_ROW:
            continue
        description = mine[-1].get("description") or ""
        reason = description.rpartition("(rejected: ")[2] if "(rejected: " in description else ""
        reason = reason[:-1] if reason.endswith(")") else reason  # the one closing "(rejected: "
        grouped.setdefault(reason, []).append(f"{p.name} (its last {run} of {len(mine)} experiments)")
    return [f"{', '.join(names)}: the agent proposed no new kernel" + (f" (last: {reason})" if reason else "")
            + f"; the loop is done with a problem after {MAX_UNEVALUATED_IN_A_ROW} such proposals in a row"
            for reason, names in grouped.items()]


def too_slow_note(data: ReportData) -> str:
    """One line when, on a CPU, the starting kernels' evaluations timed out for every problem
    evaluated, or for the problems holding most of their share of the time: the Triton
    interpreter was too slow for the shapes, so those problems were never measured (a model at
    its real size, hf:whisper or hf:bert).  Says how to make the run fit; "" otherwise."""
    if data.plan.time_kind == "gpu":
        return ""
    starts = {r.get("problem"): r for r in data.rows if r.get("status") == "baseline"}
    evaluated = [p for p in data.problems if p.name in starts]
    slow = [p for p in evaluated if timed_out(starts[p.name])]
    if not slow:
        return ""
    share, evaluated_share = sum(p.fraction for p in slow), sum(p.fraction for p in evaluated)
    every = len(slow) == len(evaluated)
    if not every and share < 0.5 * evaluated_share:
        return ""
    kept = any(p.kept for p in slow)
    if every:
        what = (f"every starting kernel's evaluation timed out ({len(slow)} problem(s))"
                + ("" if kept else ": nothing was optimized"))
    else:
        what = (f"the starting kernel's evaluation timed out for {', '.join(p.name for p in slow)} "
                f"({100 * share:.0f}% of the model's time): nothing there was measured against its start")
    shape = "x".join(str(d) for d in data.plan.input_shape)
    return (f"interpreter too slow: {what}, since the Triton interpreter on this CPU is too slow for the model's "
            f"shapes; make the model smaller with --config (fewer layers, a smaller hidden size, e.g. "
            f"num_hidden_layers=2,hidden_size=256,num_attention_heads=4 for a Hugging Face model) or give fewer tokens "
            f"with --input-shape"
            + (f" (this run: {shape})" if shape else "") + ", or allow more time per evaluation with --timeout")


def plan_from_problems(workdir: Path) -> Plan:
    """A stand-in plan for a workspace made by ``optimize --problem`` (no model, no plan.json):
    one entry per ``problems/<name>/problem.json``, equal shares, timings of the kind the
    evaluations recorded."""
    from .plan import PlanProblem

    problems, kinds = [], set()
    for pfile in sorted(Path(workdir).glob("problems/*/problem.json")):
        try:
            info = json.loads(pfile.read_text())
        except (OSError, ValueError):
            continue
        problems.append(PlanProblem(name=info.get("name") or pfile.parent.name, kind=info.get("kind", ""),
                                    dtype=info.get("dtype") or "", shapes=info.get("shapes") or [], calls=[],
                                    time_us=0.0, fraction=0.0))
    for ev in Path(workdir).glob("logs/*/*/exp_0000.json"):
        try:
            kinds.add(json.loads(ev.read_text()).get("timing_kind") or "")
        except (OSError, ValueError):
            continue
    if not problems:
        raise ValueError(f"{workdir} has neither plan.json nor problems/*/problem.json: not an autokernel workspace")
    for p in problems:
        p.fraction = 1.0 / len(problems)
    gpu = kinds == {"gpu"}
    return Plan(model="", device="cuda" if gpu else "cpu", time_kind="gpu" if gpu else "cpu", dtype="",
                input_shape=[], total_time_us=0.0, problems=problems)


# ------------------------------------------------------------------ markdown
def render_markdown(data: ReportData) -> str:
    plan, v = data.plan, data.verify
    timing_note = "" if plan.time_kind == "gpu" else " (CPU time: kernels ran under the Triton interpreter; " \
        "latencies are not GPU performance and there is no roofline)"
    lines = ["# autokernel report", ""]
    if not data.from_plan:
        return _render_problems_only(data, timing_note)
    lines += ["## What was run", "",
              f"- model: `{plan.model}`" + (" with config " + ",".join(f"{k}={v}" for k, v in data.run["config"].items())
                                              if data.run.get("config") else ""),
              f"- device: {plan.device}" + (f" ({plan.device_name})" if plan.device_name else ""),
              f"- dtype: {plan.dtype}, input shape: {'x'.join(str(d) for d in plan.input_shape)}",
              f"- op time per forward pass under the profiler: {plan.total_time_us:.1f} us ({plan.time_kind} op "
              f"time summed, when profiled; the eager wall-clock time is under Verification)"]
    if data.run:
        def earlier(key: str) -> str:
            before = data.run.get(f"earlier_{key}s")
            return f" (earlier sessions: {', '.join(str(b) for b in before)})" if before else ""

        lines.append(f"- budget: {data.run.get('budget', '—')}, agent: {data.run.get('agent', '—')}{earlier('agent')}, "
                     f"seed: {data.run.get('seed', '—')}{earlier('seed')}")
        if "spent_s" in data.run and not data.run.get("finished"):
            lines.append(f"- **not finished**: stopped (or still running) after {data.run['spent_s']:.0f} s of its budget; "
                         f"the same `autokernel run` command resumes it")
    lines.append(f"- experiments recorded: {sum(1 for r in data.rows if r.get('status') != 'baseline')}")
    lines += [f"- **{note}**" for note in stuck_notes(data)]
    lines += _unreachable_lines(data)
    if too_slow_note(data):
        lines.append(f"- **{too_slow_note(data)}**")
    lines += ["", "## Plan", "", "| problem | kind | dtype | shapes | fraction | modules |", "|---|---|---|---|---:|---|"]
    for p in plan.problems:
        shapes = "; ".join(format_shape(s) for s in p.shapes)
        mods = ", ".join(p.modules[:3]) + (f" (+{len(p.modules) - 3})" if len(p.modules) > 3 else "")
        kind = p.kind if p.supported else f"{p.kind or '—'} (unsupported: {p.note})"
        lines.append(f"| {p.name} | {kind} | {p.dtype} | {shapes} | {100 * p.fraction:.1f}% | {mods} |")
    not_covered = plan.not_covered
    lines += ["", f"Covered by supported problems: {100 * plan.covered_fraction:.1f}% of the time; "
              f"not covered: {100 * sum(u.fraction for u in not_covered):.1f}%" + (" (top: " + ", ".join(
                  f"{u.name} {100 * u.fraction:.1f}%" for u in not_covered[:5]) + ")" if not_covered else "") + "."]
    lines += _uncovered_table(plan)
    lines += ["", "## Problems" + timing_note, "",
              "| problem | experiments | kept | start (us) | best (us) | vs start | vs eager | % roofline | best kernel |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in data.problems:
        lines.append(f"| {r.name} | {r.experiments} | {r.kept} | {_fmt(r.start_us, '.1f')} | {_fmt(r.best_us, '.1f')} | "
                     f"{_fmt(r.speedup_vs_start, '.2f', 'x')} | {_fmt(r.speedup_vs_eager, '.2f', 'x')} | "
                     f"{_fmt(r.pct_roofline, '.0f', '%')} | {('`' + r.kernel + '`') if r.kernel else '—'} |")
    if plan.time_kind != "gpu":
        lines += ["", "No roofline on CPU: the interpreter's timings say nothing about GPU limits; "
                  f"{figures.EAGER_DASH_REASON}."]
    from .loop.summary import throughput_markdown

    lines += [""] + throughput_markdown(data.workdir, data.run_name)
    lines += ["## Verification", ""] if lines[-1] == "" else ["", "## Verification", ""]
    if v is None:
        lines.append("Not verified yet: run `autokernel verify " + str(data.workdir) + "`.")
    else:
        lines.append(f"**{'PASS' if v.passed else 'FAIL'}** — patched vs original on seeds {v.seeds}: "
                     f"relative error {', '.join(f'{e:.2e}' for e in v.errors)} (bound {v.tolerance:.0e}, {v.dtype})"
                     f"{precision_clause(v.full_precision)}.")
        if v.message:
            lines.append(f"\nNote: {v.message}.")
        kinds: dict[str, int] = {}
        for _, kind in v.replaced:
            kinds[kind] = kinds.get(kind, 0) + 1
        lines.append("\nReplaced: " + (", ".join(f"{k} ×{n}" for k, n in kinds.items()) or "nothing") + ".")
        if v.skipped:
            more = f" (and {len(v.skipped) - 10} more)" if len(v.skipped) > 10 else ""
            lines.append("\nNot applied: " + "; ".join(f"{a} ({b})" for a, b in v.skipped[:10]) + more + ".")
        if v.eager_ms is None:
            lines.append(f"\nNot timed: the last verify (of {v.created}) checked correctness only (`--no-timing`); "
                         f"`autokernel verify {data.workdir}` times the models.")
        else:
            lines += ["", *_timing_table(v)]
            lines += ["", f"End-to-end speedup vs eager: {_fmt(v.speedup_vs_eager, '.3f', 'x')} "
                      f"(Amdahl prediction from the kernels applied: {_fmt(v.predicted_vs_eager, '.3f', 'x')})"
                      + (f"; vs torch.compile: {_fmt(v.speedup_vs_compile, '.3f', 'x')}" if v.compile_ms else "")
                      + (f" — {v.timing_note}" if v.timing_note else "") + "."]
            if v.compile_note:
                lines.append(f"\n{v.compile_note}.")
        if v.breakdown is not None:
            lines += breakdown_markdown(v.breakdown)
        if v.predictions:
            lines += ["", "| problem | fraction | best vs eager | Amdahl (vs eager) | best vs start | Amdahl (vs start) | applied |",
                      "|---|---:|---:|---:|---:|---:|---|"]
            for k in v.predictions:
                lines.append(f"| {k.problem} | {100 * k.fraction:.1f}% | {_fmt(k.speedup_vs_eager, '.2f', 'x')} | "
                             f"{_fmt(k.amdahl_vs_eager, '.3f', 'x')} | {_fmt(k.speedup_vs_start, '.2f', 'x')} | "
                             f"{_fmt(k.amdahl_vs_start, '.3f', 'x')} | {'yes' if k.applied else 'no'} |")
    lines += _top_kept(data)
    charts = "`progress.png` (every experiment's speedup vs the starting kernel)"
    if plan.time_kind == "gpu":
        charts += ", `roofline.png` (best kernel per problem against its roofline)"
    else:
        charts += "; no roofline chart: a CPU run has no roofline"
    lines += ["", f"Charts: {charts}.", ""]
    return "\n".join(lines)


def _problems_table(data: ReportData, with_fraction: bool = True) -> list[str]:
    lines = ["| problem | exps | kept | start us | best us | vs start | vs eager | % roof | best kernel |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in data.problems:
        lines.append(f"| {r.name} | {r.experiments} | {r.kept} | {_fmt(r.start_us, '.1f')} | {_fmt(r.best_us, '.1f')} | "
                     f"{_fmt(r.speedup_vs_start, '.2f', 'x')} | {_fmt(r.speedup_vs_eager, '.2f', 'x')} | "
                     f"{_fmt(r.pct_roofline, '.0f', '%')} | {('`' + r.kernel + '`') if r.kernel else '—'} |")
    return lines


def _render_problems_only(data: ReportData, timing_note: str) -> str:
    """The report of a workspace of single problems: no model, so no plan and no verification."""
    names = ", ".join(p.name for p in data.problems)
    lines = ["# autokernel report", "", "## What was run", "",
             f"- problems optimized on their own (`autokernel optimize --problem`): {names}",
             f"- experiments recorded: {sum(1 for r in data.rows if r.get('status') != 'baseline')}",
             *[f"- **{note}**" for note in stuck_notes(data)],
             *_unreachable_lines(data),
             "- no model: nothing to verify end to end (`autokernel run` or `optimize --plan` make a run from a model)",
             "", "## Problems" + timing_note, "", *_problems_table(data)]
    if data.plan.time_kind != "gpu":
        lines += ["", f"No roofline on CPU; {figures.EAGER_DASH_REASON}."]
    from .loop.summary import throughput_markdown

    throughput = throughput_markdown(data.workdir, data.run_name)
    lines += ["", *throughput[:-1]] if throughput else []  # its trailing blank line: _top_kept starts with one
    lines += _top_kept(data)
    lines += ["", "Chart: `progress.png` (every experiment's speedup vs the starting kernel).", ""]
    return "\n".join(lines)


def _unreachable_lines(data: ReportData) -> list[str]:
    from .loop.summary import unreachable_note

    note = unreachable_note(data.workdir, data.run_name)
    return [f"- {note}"] if note else []


def _top_kept(data: ReportData) -> list[str]:
    kept = [r for r in data.rows if r.get("status") == "keep"]
    kept.sort(key=lambda r: -(as_float(r.get("speedup_vs_start")) or 0.0))
    lines = ["", "## Top kept experiments", ""]
    if not data.rows:
        return lines + ["No kernel was evaluated: the run has no results (its budget ran out before the loop "
                        "started, or the loop has not run yet)."]
    if not kept:
        return lines + ["None kept: every problem is still at its starting kernel."]
    lines += ["| problem | experiment | vs start | vs eager | description |", "|---|---:|---:|---:|---|"]
    for r in kept[:10]:
        lines.append(f"| {r.get('problem')} | {r.get('experiment')} | {_fmt(as_float(r.get('speedup_vs_start')), '.2f', 'x')} | "
                     f"{_fmt(as_float(r.get('speedup_vs_eager')), '.2f', 'x')} | {(r.get('description') or '').replace('|', '/')} |")
    return lines


def _ratio(before: float, after: float) -> str:
    return f"{before / after:.2f}x" if before > 0 and after > 0 else "—"


def _timing_table(v) -> list[str]:
    """verify's timings: from idle (the headline), and on a GPU back to back and as GPU work alone."""
    rows = [("eager", "eager", v.eager_ms), ("patched", "patched", v.patched_ms),
            (f"torch.compile ({v.compile_mode or 'max-autotune-no-cudagraphs'})", "compile", v.compile_ms),
            ("torch.compile of patched", "compile_patched", v.compile_patched_ms)]
    more = bool(v.back_to_back_ms or v.gpu_only_ms)
    if not more:
        lines = ["| model | ms per forward (wall clock, median) |", "|---|---:|"]
        return lines + [f"| {label} | {ms:.3f} |" for label, _, ms in rows if ms is not None]
    lines = ["| model | ms per forward from idle | back to back | GPU work alone |", "|---|---:|---:|---:|"]
    for label, key, ms in rows:
        if ms is not None:
            lines.append(f"| {label} | {ms:.3f} | {_fmt(v.back_to_back_ms.get(key), '.3f')} | "
                         f"{_fmt(v.gpu_only_ms.get(key), '.3f')} |")
    return lines


def breakdown_markdown(b: Breakdown) -> list[str]:
    """The 'Time breakdown before/after' section (lines, starting with a blank one)."""
    unit = "GPU kernel time" if b.time_kind == "gpu" else "CPU op time"
    before = "the plan (profiled earlier)" if b.before_source == "plan.json" else "the original model"
    lines = ["", "### Time breakdown before/after", "",
             f"Per forward pass ({unit}; before: {before}, after: the patched model, profiled the same way, "
             f"{b.iters} pass{'' if b.iters == 1 else 'es'} after {b.warmup} warm-up)" + (f" — {b.note}" if b.note else "") + ". "
             "These are op times under the profiler, summed: they are not the wall-clock times of the table "
             "above, which the end-to-end speedup uses.", "",
             "| problem | kind | before (us) | before share | after (us) | after share | before/after | in kernel (us) | applied |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in b.rows:
        lines.append(f"| {r.problem} | {r.kind} | {r.before_us:.1f} | {100 * r.before_fraction:.1f}% | {r.after_us:.1f} | "
                     f"{100 * r.after_fraction:.1f}% | {_ratio(r.before_us, r.after_us)} | {r.after_op_us:.1f} | "
                     f"{'yes' if r.applied else 'no'} |")
    lines.append(f"| not covered | — | {b.uncovered_before_us:.1f} | {100 * b.uncovered_before_fraction:.1f}% | "
                 f"{b.uncovered_after_us:.1f} | {100 * b.uncovered_after_fraction:.1f}% | "
                 f"{_ratio(b.uncovered_before_us, b.uncovered_after_us)} | — | — |")
    lines.append(f"| **total** | | {b.total_before_us:.1f} | 100% | {b.total_after_us:.1f} | 100% | "
                 f"{_ratio(b.total_before_us, b.total_after_us)} | {sum(r.after_op_us for r in b.rows):.1f} | |")
    if b.uncovered_after_top:
        lines += ["", "Not covered after patching (largest): " + ", ".join(
            f"{name} {us:.1f} us" for name, us in b.uncovered_after_top) + "."]
    return lines


def breakdown_table(b: Breakdown):
    """The same breakdown as a rich table for the terminal."""
    unit = "GPU kernel time" if b.time_kind == "gpu" else "CPU op time"
    table = compact_table(f"time breakdown before/after, per forward ({unit})" + (f" — {b.note}" if b.note else ""),
                          [(col, "left" if col in ("problem", "applied") else "right") for col in
                           ("problem", "before us", "before", "after us", "after", "ratio", "kernel us", "applied")])
    for r in b.rows:
        table.add_row(r.problem, f"{r.before_us:.1f}", f"{100 * r.before_fraction:.1f}%", f"{r.after_us:.1f}",
                      f"{100 * r.after_fraction:.1f}%", _ratio(r.before_us, r.after_us), f"{r.after_op_us:.1f}",
                      "yes" if r.applied else "no")
    table.add_row("not covered", f"{b.uncovered_before_us:.1f}", f"{100 * b.uncovered_before_fraction:.1f}%",
                  f"{b.uncovered_after_us:.1f}", f"{100 * b.uncovered_after_fraction:.1f}%",
                  _ratio(b.uncovered_before_us, b.uncovered_after_us), "", "")
    table.add_row("total", f"{b.total_before_us:.1f}", "100%", f"{b.total_after_us:.1f}", "100%",
                  _ratio(b.total_before_us, b.total_after_us), f"{sum(r.after_op_us for r in b.rows):.1f}", "")
    return table


# ------------------------------------------------------------------ charts
def plot_progress(data: ReportData, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    elapsed, t = [], 0.0
    for r in data.rows:
        t += as_float(r.get("wall_s")) or 0.0
        elapsed.append(t / 60.0)
    names = [p.name for p in data.problems] or sorted({r.get("problem", "") for r in data.rows})
    cmap = plt.get_cmap("tab10")
    kept_ys: list[float] = []
    all_ys: list[float] = []
    for i, name in enumerate(names):
        pts = [(x, r) for x, r in zip(elapsed, data.rows) if r.get("problem") == name]
        xs = [x for x, r in pts if as_float(r.get("speedup_vs_start")) is not None]
        ys = [as_float(r.get("speedup_vs_start")) for _, r in pts if as_float(r.get("speedup_vs_start")) is not None]
        if not xs:
            continue
        color = cmap(i % 10)
        ax.plot(xs, ys, "-", color=color, alpha=0.35, linewidth=1)
        ax.scatter(xs, ys, s=12, color=color, alpha=0.6, label=name)
        kx = [x for x, r in pts if r.get("status") in KEPT_STATUSES and as_float(r.get("speedup_vs_start")) is not None]
        ky = [as_float(r.get("speedup_vs_start")) for _, r in pts
              if r.get("status") in KEPT_STATUSES and as_float(r.get("speedup_vs_start")) is not None]
        kept_ys += ky
        all_ys += ys
        ax.scatter(kx, ky, s=60, marker="*", color=color, edgecolors="black", linewidths=0.5)
        best, run_best = [], 0.0
        for y in ky:
            run_best = max(run_best, y)
            best.append(run_best)
        ax.step(kx, best, where="post", color=color, linewidth=2)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_ylim(*progress_y_limits(kept_ys, all_ys))
    ax.set_xlabel("run time (minutes, experiments in order)")
    ax.set_ylabel("speedup vs starting kernel")
    kind = "GPU" if data.plan.time_kind == "gpu" else "interpreter/CPU timings, not GPU performance"
    ax.set_title(f"autokernel progress — {data.plan.model} ({kind}); ★ kept")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def progress_y_limits(kept: list[float], every: list[float], margin: float = 1.25) -> tuple[float, float]:
    """The progress chart's y range: the start (1.0) and every kept point, with a margin; a
    reverted outlier far outside that range is left off the chart instead of squashing it."""
    lo, hi = min([1.0, *kept]), max([1.0, *kept])
    lo, hi = lo / margin, hi * margin
    inside = [y for y in every if lo / 2 <= y <= hi * 2]  # reverts near the kept range still show
    return min([lo, *inside]) * 0.98, max([hi, *inside]) * 1.02


def plot_roofline(data: ReportData, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    rows = [r for r in data.problems if r.pct_roofline is not None]
    if not rows:
        ax.text(0.5, 0.5, "no roofline data\n(CPU/interpreter run, or no timed kernel)",
                ha="center", va="center", fontsize=12)
        ax.set_axis_off()
    else:
        names = [r.name for r in rows]
        start_pct = []
        for r in rows:
            # the baseline's % of roofline scales with its latency: same floor, slower time
            start_pct.append(r.pct_roofline * r.best_us / r.start_us if r.start_us and r.best_us else 0.0)
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], start_pct, width=0.4, label="starting kernel", color="#bbbbbb")
        ax.bar([i + 0.2 for i in x], [r.pct_roofline for r in rows], width=0.4, label="best kernel", color="#1f77b4")
        ax.axhline(100, color="black", linewidth=0.8)
        ax.axhline(90, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=30, ha="right")
        ax.set_ylabel("% of roofline (time-weighted)")
        ax.legend(fontsize=8)
    ax.set_title(f"roofline — {data.plan.model}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(workdir: str | Path) -> ReportData:
    """Write report.md, progress.png and roofline.png into ``workdir``; return the data."""
    data = collect(workdir)
    (data.workdir / "report.md").write_text(render_markdown(data))
    plot_progress(data, data.workdir / "progress.png")
    roofline = data.workdir / "roofline.png"
    if has_roofline(data):
        plot_roofline(data, roofline)
    else:
        roofline.unlink(missing_ok=True)  # a CPU run has no roofline: no empty chart
    return data


def has_roofline(data: ReportData) -> bool:
    return data.plan.time_kind == "gpu" and any(r.pct_roofline is not None for r in data.problems)


def written_files(data: ReportData) -> list[str]:
    return ["report.md", "progress.png"] + (["roofline.png"] if has_roofline(data) else [])


def fmt_us(x: float | None) -> str:
    """A latency for a narrow table cell: whole microseconds from 100 up."""
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def compact_table(title: str, columns: list[tuple[str, str]]):
    """A rich table that stays within 80 columns for typical content: no vertical rules,
    one space between columns.  ``columns``: (header, "left" | "right")."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
                  collapse_padding=True, show_edge=False)
    for header, justify in columns:
        table.add_column(header, justify=justify)
    return table


def rich_table(data: ReportData):
    cpu = data.plan.time_kind != "gpu"
    model = data.plan.model or "problems only"
    title = f"autokernel: {model} on {data.plan.device}" + (" (interpreter times, not GPU)" if cpu else "")
    table = compact_table(title, [("problem", "left"), ("share", "right"), ("exps", "right"), ("kept", "right"),
                                  ("start us", "right"), ("best us", "right"), ("vs start", "right"),
                                  ("vs eager", "right"), ("% roof", "right")])
    for r in data.problems:
        table.add_row(r.name, f"{100 * r.fraction:.0f}%", str(r.experiments), str(r.kept),
                      fmt_us(r.start_us), fmt_us(r.best_us), _fmt(r.speedup_vs_start, ".2f", "x").replace("—", "-"),
                      _fmt(r.speedup_vs_eager, ".2f", "x").replace("—", "-"),
                      _fmt(r.pct_roofline, ".0f", "%").replace("—", "-"))
    return table


def _uncovered_table(plan: Plan) -> list[str]:
    """Every op of the profile that no supported problem covers (unsupported problems too), with
    its share of the time: what the run could not speed up, so that nothing is hidden behind the
    covered share."""
    if not plan.not_covered:
        return []
    lines = ["", "### Not covered by any problem", "", "| op | time per forward (us) | share |", "|---|---:|---:|"]
    for u in plan.not_covered:
        lines.append(f"| {u.name} | {u.time_us:.1f} | {100 * u.fraction:.2f}% |")
    return lines

