"""The arena's outputs: an 80-column table, ``report.md`` and a sorted speedup plot."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..files import write_text_atomic
from .records import ProblemResult
from .scoring import P_VALUES, p_name

WIDTH = 80
_COLUMNS = (("problem", 27), ("verdict", 11), ("failed at", 11), ("x eager", 7), ("x compile", 9), ("held-out", 9))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def row_cells(r: ProblemResult) -> list[str]:
    verdict = r.verdict if r.status == "judged" else r.status
    return [r.problem, verdict, r.failed_stage or "", _x(r.speedup_vs_eager), _x(r.speedup_vs_compile),
            r.heldout or "-"]


def table(results: Sequence[ProblemResult], summary: dict) -> str:
    """The per-problem table and the scores, every line at most 80 characters."""
    def line(cells: Sequence[str]) -> str:
        return " ".join(_cut(c, w).ljust(w) if i < 3 else _cut(c, w).rjust(w)
                        for i, (c, (_, w)) in enumerate(zip(cells, _COLUMNS))).rstrip()

    lines = [line([name for name, _ in _COLUMNS]), "-" * WIDTH]
    lines += [line(row_cells(r)) for r in results]
    lines.append("-" * WIDTH)
    lines += score_lines(summary)
    notes = sorted({r.timing_note for r in results if r.timing_note})
    lines += [_cut("speedups: " + n, WIDTH) for n in notes]
    for r in results:
        if r.status == "skipped":
            lines.append(_cut(f"skipped {r.problem}: {r.message}", WIDTH))
    return "\n".join(lines)


def score_lines(summary: dict) -> list[str]:
    n, skipped = summary["problems"], summary["skipped"]
    out = [f"{n} problem(s) counted" + (f", {skipped} skipped (cannot run here)" if skipped else "")]
    for key, label in (("file_sizes", "file sizes"), ("heldout", "+ held-out")):
        part = summary[key]
        cells = [f"correct {_pct(part['correct'])}"] + [f"{p_name(p)} {_pct(part[p_name(p)])}" for p in P_VALUES]
        out.append(f"{label:<11}" + "  ".join(cells))
    return out


def markdown(results: Sequence[ProblemResult], summary: dict, title: str, plot_name: str | None) -> str:
    head = ["problem", "verdict", "failed stage", "x eager", "x torch.compile", "held-out", "sizes",
            "held-out sizes", "message"]
    lines = [f"# {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        message = r.message or ""
        if r.heldout == "fail":
            message += "; held-out: " + r.heldout_message
        cells = row_cells(r) + [r.sizes, r.heldout_sizes, message.replace("|", "/")[:240]]
        lines.append("| " + " | ".join(c or "" for c in cells) + " |")
    lines += ["", "```", *score_lines(summary), "```", ""]
    notes = sorted({r.timing_note for r in results if r.timing_note})
    lines += [f"Speedups: {n}." for n in notes]
    if plot_name:
        lines += ["", f"![speedup per problem, sorted]({plot_name})"]
    return "\n".join(lines) + "\n"


def plot(results: Sequence[ProblemResult], path: Path) -> bool:
    """Speedup vs eager per correct problem, sorted; False when nothing was timed."""
    timed = sorted(((r.speedup_vs_eager, r.problem) for r in results if r.correct and r.speedup_vs_eager),
                   reverse=True)
    if not timed:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 0.25 * len(timed) + 2), 4))
    ax.bar(range(len(timed)), [s for s, _ in timed], color=["tab:green" if s > 1 else "tab:red" for s, _ in timed])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("speedup vs PyTorch eager")
    ax.set_xticks(range(len(timed)), [n for _, n in timed], rotation=90, fontsize=6)
    ax.set_title("speedup per problem (correct solutions), sorted")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write(out_dir: Path, results: Sequence[ProblemResult], summary: dict, title: str) -> dict[str, Path]:
    """``arena.json``, ``report.md`` and (when something was timed) ``speedup.png``."""
    import json

    paths = {"json": out_dir / "arena.json", "report": out_dir / "report.md"}
    plot_path = out_dir / "speedup.png"
    if plot(results, plot_path):
        paths["plot"] = plot_path
    write_text_atomic(paths["json"], json.dumps(as_json(results, summary), indent=1, default=str))
    write_text_atomic(paths["report"], markdown(results, summary, title, plot_path.name if "plot" in paths else None))
    return paths


def as_json(results: Sequence[ProblemResult], summary: dict) -> dict:
    return {"problems": [r.to_dict() for r in results], "fast_p": summary}
