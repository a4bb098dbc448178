"""Where each kernel of a workspace was tuned, and the warnings that follow from it.

The loop records the device it tuned on in ``problems/<name>/problem.json`` (``extra.tuned_on``:
a GPU's name, or ``"interpreter"`` for a CPU run under the Triton interpreter).  Knob settings
chosen for the interpreter's speed say nothing about a GPU, so ``apply`` and ``export`` warn
when such a kernel is used on (or shipped for) a GPU.
"""
from __future__ import annotations

import json
from pathlib import Path

INTERPRETER = "interpreter"


def tuned_on_label(device: str) -> str:
    """What to record for a run on ``device`` ("cpu", "cuda", "cuda:1")."""
    if not str(device).startswith("cuda"):
        return INTERPRETER
    try:
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    except Exception:
        return str(device)


def tuned_on(workdir: str | Path, name: str) -> str | None:
    """The recorded device of ``problems/<name>``, or None when the workspace predates it."""
    path = Path(workdir) / "problems" / name / "problem.json"
    try:
        extra = json.loads(path.read_text()).get("extra") or {}
    except (OSError, ValueError, AttributeError):
        return None
    value = extra.get("tuned_on") if isinstance(extra, dict) else None
    return str(value) if value else None


def interpreter_tuned(workdir: str | Path, names: list[str]) -> list[str]:
    """The problems among ``names`` whose kernel was tuned on the interpreter."""
    return [n for n in names if tuned_on(workdir, n) == INTERPRETER]


def gpu_use_warning(workdir: str | Path, names: list[str]) -> str | None:
    """A warning when kernels tuned on the interpreter are put on a GPU; None otherwise."""
    cpu_tuned = interpreter_tuned(workdir, names)
    if not cpu_tuned:
        return None
    kept = _kept(workdir)
    tuned = [n for n in cpu_tuned if kept is None or n in kept]
    untouched = [n for n in cpu_tuned if n not in tuned]
    parts = []
    if tuned:
        parts.append(f"kernel(s) {', '.join(tuned)} were tuned under the Triton interpreter on CPU: their knob "
                     f"settings were chosen for the interpreter's speed, not a GPU's")
    if untouched:
        parts.append(f"kernel(s) {', '.join(untouched)} are their starting kernels: the run under the Triton "
                     f"interpreter on CPU kept no change to them")
    return "; ".join(parts) + "; re-run `autokernel optimize` on a GPU"


def _kept(workdir: str | Path) -> set[str] | None:
    """The problems with a kept experiment in ``results.tsv`` (None where there is no file): a
    problem without one still has its starting kernel, which no run tuned (hf:whisper's matmul
    after a CPU run that kept nothing for it was said to have knobs "chosen for the interpreter's
    speed")."""
    import csv

    path = Path(workdir) / "results.tsv"
    if not path.is_file():
        return None
    try:
        with path.open(newline="") as fh:
            return {r.get("problem") or "" for r in csv.DictReader(fh, delimiter="\t") if r.get("status") == "keep"}
    except (OSError, csv.Error):
        return None


def nothing_replaced_warning(skipped: list) -> str:
    """Why nothing was replaced: every reason, each said once, the problems that share it named
    together (``matmul: ...`` reasons already name their problem)."""
    by_reason: dict[str, list[str]] = {}
    for what, why in skipped:
        by_reason.setdefault(why, []).append(what)
    parts = [why if all(why.startswith(f"{w}:") for w in whats) else f"{', '.join(whats)}: {why}"
             for why, whats in by_reason.items()]
    return "autokernel.apply replaced nothing: the model runs unchanged" + (f" ({'; '.join(parts)})" if parts else "")
