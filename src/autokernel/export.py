"""Take the best kernels out of a workdir (``autokernel export DIR --format files|package``).

* ``files``   — ``<out>/<problem>.py`` for each best kernel and a ``README.md`` listing them
  (kind, signature, shapes, dtype, measured speedups).
* ``package`` — a small installable directory: ``pyproject.toml`` and a module
  ``<name>/`` holding the kernels in the workdir layout (``plan.json``, ``results.tsv``,
  ``problems/<problem>/kernel.py``) and ``apply(model)``, which calls
  ``autokernel.apply`` on that copy.  The package needs ``autokernel`` installed: the
  integration code (custom ops, module replacement) is autokernel's, not copied.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .integrate import as_float, best_rows, judged_correct, kernel_path, load_workdir_plan, read_results
from .problems.base import format_shape

FORMATS = ("files", "package")


class ExportError(ValueError):
    """Bad export request (user mistake, exit code 2)."""


@dataclass
class ExportedKernel:
    problem: str
    kind: str
    dtype: str
    shapes: str
    speedup_vs_start: float | None
    speedup_vs_eager: float | None
    source: Path


def exported_kernels(workdir: Path) -> list[ExportedKernel]:
    plan = _plan(workdir)
    results = read_results(workdir)
    best = best_rows(results)
    out = []
    for p in plan.supported:
        path = kernel_path(workdir, p.name)
        if not path.is_file() or not judged_correct(results, best, p.name):
            continue
        row = best.get(p.name, {})
        show = _named_shape if is_kernelbench(p.kind) else format_shape
        shapes, dtype = "; ".join(show(s) for s in p.shapes), p.dtype
        if not shapes or not dtype:  # `optimize --problem KIND|FILE` without --shape/--dtype: the defaults
            default_shapes, default_dtypes = _problem_defaults(p.kind, _spec(path, p.kind), show,
                                                               "cuda" if plan.time_kind == "gpu" else "cpu")
            shapes, dtype = shapes or default_shapes, dtype or default_dtypes
        out.append(ExportedKernel(p.name, p.kind, dtype, shapes, as_float(row.get("speedup_vs_start")),
                                  as_float(row.get("speedup_vs_eager")), path))
    return out


def is_kernelbench(kind: str) -> bool:
    return kind.startswith("kernelbench:")


def _named_shape(shape: dict) -> str:
    """A KernelBench file's sizes by name (``batch_size=48, dim=80``): its constants have no order."""
    return ", ".join(f"{name}={value}" for name, value in shape.items())


def _spec(kernel: Path, kind: str) -> str:
    """The problem's spec (a kind, or the problem file's path) as ``problem.json`` records it."""
    try:
        return json.loads((kernel.parent / "problem.json").read_text()).get("spec") or kind
    except (OSError, ValueError, AttributeError):
        return kind


def _problem_defaults(kind: str, spec: str, show, device: str) -> tuple[str, str]:
    """The shapes and dtypes the harness judges a problem at when none were given
    (``problem.json`` holds null for them): a built-in kind's defaults, or a problem file's
    (a KernelBench file's own sizes); ("", "") when the file cannot be read any more."""
    from .problems.base import dtype_name
    from .problems.registry import BUILTIN_KINDS, ProblemError, get_problem

    if kind in BUILTIN_KINDS:
        spec = kind
    elif not spec.endswith(".py"):
        return "", ""
    try:
        problem = get_problem(spec)
    except (ProblemError, OSError):  # the problem file moved or broke since the run
        return "", ""
    return ("; ".join(show(s) for s in problem.shapes_for(device)),
            ", ".join(dtype_name(d) for d in problem.dtypes))


def _plan(workdir: Path):
    """The workspace's plan; for a workspace of single problems (no model), a stand-in."""
    from .report import plan_from_problems

    if (Path(workdir) / "plan.json").is_file() or not (Path(workdir) / "problems").is_dir():
        return load_workdir_plan(workdir)
    plan = plan_from_problems(workdir)
    plan.model = "+".join(p.name for p in plan.problems)
    return plan


def _speed(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def _readme(kernels: list[ExportedKernel], model: str, time_kind: str, files: bool, package: str = "") -> str:
    kernelbench = [is_kernelbench(k.kind) for k in kernels]
    if all(kernelbench) and kernels:
        defines = "Each file defines `ModelNew`, with the constructor and parameters of its KernelBench file's `Model`,"
    else:
        defines = "Each file defines `kernel_fn` with the signature of its problem kind (see `autokernel problems`)" \
            + (" or, for a KernelBench problem, `ModelNew`" if any(kernelbench) else "")
    lines = [f"# autokernel kernels for `{model}`", "",
             f"{defines} and was judged correct by the autokernel harness at the shapes and dtype below.", ""]
    if time_kind != "gpu":
        lines += ["The speedups below were measured under the Triton interpreter on CPU: they are not GPU "
                  "performance.", ""]
    lines += ["| file | kind | dtype | shapes | vs start | vs eager |", "|---|---|---|---|---:|---:|"]
    for k in kernels:
        name = f"{k.problem}.py" if files else f"{package}/data/problems/{k.problem}/kernel.py"
        lines.append(f"| `{name}` | {k.kind} | {k.dtype} | {k.shapes} | {_speed(k.speedup_vs_start)} | "
                     f"{_speed(k.speedup_vs_eager)} |")
    return "\n".join(lines) + "\n"


def export_files(workdir: Path, out: Path) -> list[Path]:
    kernels = exported_kernels(workdir)
    plan = _plan(workdir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for k in kernels:
        dest = out / f"{k.problem}.py"
        shutil.copyfile(k.source, dest)
        written.append(dest)
    readme = out / "README.md"
    readme.write_text(_readme(kernels, plan.model, plan.time_kind, files=True))
    written.append(readme)
    return written


def package_name(model: str) -> str:
    stem = Path(model.split(":")[0]).stem if ("/" in model or model.endswith(".py")) else model
    stem = re.sub(r"[^0-9a-zA-Z]+", "_", stem.replace("hf:", "hf_")).strip("_").lower() or "model"
    return f"autokernel_{stem}_kernels"


_INIT = '''"""Kernels found by autokernel for `{model}`.  ``apply(model)`` returns a copy of ``model``
running them (inference only); see README.md.  The keyword arguments are ``autokernel.apply``'s
(``inplace``, ``allow_slower``, ``cuda_graphs``, ``under_compile``, ``only``, ``in_model``)."""
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def apply(model, **options):
    from autokernel.integrate import apply as _apply

    if not (DATA / "plan.json").is_file():
        raise RuntimeError("these kernels were optimized as single problems, not profiled from a model: there is "
                           "no model to apply them to; use the kernel files under data/problems/ (see README.md)")
    return _apply(model, DATA, **options)
'''

_PYPROJECT = '''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "Triton kernels found by autokernel for {model}"
requires-python = ">=3.10"
dependencies = ["autokernel", "torch", "triton"]

# data/ and its folders are namespace packages, so that setuptools ships them without warnings
[tool.setuptools.packages.find]
where = ["."]
include = ["{name}", "{name}.*"]
namespaces = true

[tool.setuptools.package-data]
"*" = ["*.json", "*.tsv", "*.py", "*.md"]
'''


def export_package(workdir: Path, out: Path) -> list[Path]:
    plan = _plan(workdir)
    kernels = exported_kernels(workdir)
    name = package_name(plan.model)
    pkg = out / name
    data = pkg / "data"
    (data / "problems").mkdir(parents=True, exist_ok=True)
    written = []
    for fname in ("plan.json", "results.tsv", "verify.json"):  # verify's choices: apply follows them on that GPU
        if (workdir / fname).is_file():
            shutil.copyfile(workdir / fname, data / fname)
            written.append(data / fname)
    for k in kernels:
        dest = data / "problems" / k.problem
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(k.source, dest / "kernel.py")
        written.append(dest / "kernel.py")
        meta = k.source.parent / "problem.json"
        if meta.is_file():
            shutil.copyfile(meta, dest / "problem.json")
            written.append(dest / "problem.json")
    init = pkg / "__init__.py"
    init.write_text(_INIT.format(model=plan.model))
    readme_text = _readme(kernels, plan.model, plan.time_kind, files=False, package=name)
    if (workdir / "plan.json").is_file():
        readme_text += (f"\n## Use\n\n```python\nimport {name}\nfast_model = {name}.apply(model)\n```\n\n"
                        "`apply` needs `autokernel` installed (it registers each kernel as a PyTorch custom op and "
                        "replaces the matching modules). The patched model is for inference: the ops have no "
                        "backward.\n")
    else:  # `optimize --problem`: no model was profiled, so there are no modules to replace
        readme_text += ("\n## Use\n\nThese kernels were optimized as single problems, not profiled from a model, "
                        "so `apply(model)` has nothing to replace. Each kernel file is standalone: import it and "
                        + ("build `ModelNew` as you would the problem's `Model`" if all(is_kernelbench(k.kind)
                                                                                        for k in kernels)
                           else "call its entry point (`kernel_fn`, or `ModelNew` for a KernelBench problem)")
                        + ".\n")
    (pkg / "README.md").write_text(readme_text)
    (out / "README.md").write_text(readme_text)
    pyproject = out / "pyproject.toml"
    pyproject.write_text(_PYPROJECT.format(dist=name.replace("_", "-"), name=name, model=plan.model))
    written += [init, pkg / "README.md", out / "README.md", pyproject]
    return written


def export(workdir: str | Path, fmt: str, out: str | Path | None = None) -> tuple[Path, list[Path]]:
    workdir = Path(workdir)
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    dest = Path(out) if out else workdir / "export" / fmt
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())) and dest.resolve() != (workdir / "export" / fmt).resolve():
        raise ExportError(f"--out {dest} exists and is not an empty directory")
    if not exported_kernels(workdir):
        raise ExportError(f"nothing to export: no kernel of {workdir} was judged correct (no run has evaluated one "
                          f"yet, or every one failed); `autokernel report {workdir}` says what happened")
    if dest.exists() and dest.resolve() == (workdir / "export" / fmt).resolve():
        shutil.rmtree(dest)
    written = export_files(workdir, dest) if fmt == "files" else export_package(workdir, dest)
    return dest, written
