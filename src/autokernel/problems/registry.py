"""Problem registry: built-in kinds by name, user problem files and KernelBench files by path."""
from __future__ import annotations

import importlib
import itertools
from pathlib import Path
from types import ModuleType

from .base import Problem

# kind -> module under autokernel.problems that defines ``make_problem() -> Problem``
BUILTIN_KINDS: dict[str, str] = {
    "matmul": "matmul",
    "softmax": "softmax",
    "layernorm": "layernorm",
    "rmsnorm": "rmsnorm",
    "attention": "attention",
    "attention_masked": "attention_masked",
    "attention_rotary": "attention_rotary",
    "attention_softcap": "attention_softcap",
    "attention_sinks": "attention_sinks",
    "attention_cross": "attention_cross",
    "swiglu": "swiglu",
    "fused_mlp": "fused_mlp",
    "cross_entropy": "cross_entropy",
    "rotary": "rotary",
    "rotary_interleaved": "rotary_interleaved",
    "rotary_pairs_to_halves": "rotary_pairs_to_halves",
    "reduce": "reduce",
    "add_rmsnorm": "add_rmsnorm",
    "add_layernorm": "add_layernorm",
    "gelu": "gelu",
    "geglu": "geglu",
    "swiglu_packed": "swiglu_packed",
    "geglu_packed": "geglu_packed",
    "embedding": "embedding",
    "rotary_table": "rotary_table",
    "linear_gelu": "linear_gelu",
    "linear_relu": "linear_relu",
    "linear_relu2": "linear_relu2",
    "moe_experts": "moe_experts",
    "moe_experts_gptoss": "moe_experts_gptoss",
    "softcap": "softcap",
    "xielu": "xielu",
    "shifted_windows": "shifted_windows",
    "window_bias": "window_bias",
    "selective_scan": "selective_scan",
    "causal_conv1d": "causal_conv1d",
    "relative_position_bias": "relative_position_bias",
}

KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"


class ProblemError(ValueError):
    """A problem spec that names nothing usable (a user mistake, exit code 2)."""


def list_kinds() -> list[str]:
    return list(BUILTIN_KINDS)


def get_problem(spec: str) -> Problem:
    """Resolve a problem spec: a built-in kind name, or a path to a problem file
    (autokernel format or KernelBench format)."""
    if spec in BUILTIN_KINDS:
        module = importlib.import_module(f"autokernel.problems.{BUILTIN_KINDS[spec]}")
        problem = module.make_problem()
        if problem.starter is None:
            problem.starter = KERNELS_DIR / f"{spec}.py"
        return problem
    path = Path(spec)
    if path.suffix == ".py" or path.exists():
        if path.is_dir():
            raise ProblemError(f"problem file {spec} is a directory: give one .py problem file (a folder of "
                               f"KernelBench files is judged with `autokernel arena {spec} --solutions DIR`)")
        if not path.is_file():
            raise ProblemError(f"problem file not found: {spec}")
        from .custom import load_problem_file

        return load_problem_file(path)
    raise ProblemError(f"unknown problem {spec!r}; known kinds: {', '.join(BUILTIN_KINDS)} (or a path to a problem file)")


def starter_source(kind: str) -> str:
    if kind not in BUILTIN_KINDS:
        raise ProblemError(f"unknown problem kind {kind!r}; known kinds: {', '.join(BUILTIN_KINDS)}")
    return (KERNELS_DIR / f"{kind}.py").read_text()


_LOADED = itertools.count()  # a fresh module name per load_starter call


def load_starter(kind: str, knobs: dict | None = None) -> ModuleType:
    """The shipped starter kernel file of ``kind`` imported as a fresh module of its own (each
    call another module: benchmarks time several knob settings side by side), ``knobs`` set
    over its ``KNOBS``."""
    import importlib.util

    starter_source(kind)  # an unknown kind: ProblemError
    spec = importlib.util.spec_from_file_location(f"starter_{kind}_{next(_LOADED)}", KERNELS_DIR / f"{kind}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if knobs:
        module.KNOBS.update(knobs)
    return module

