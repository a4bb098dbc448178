"""Baseline timings: the problem's eager op (``problem.eager``, by default the reference) and
``torch.compile`` of it with ``mode="max-autotune-no-cudagraphs"``, timed exactly like the
kernels (timing.py), in the parent process (trusted code only).

On a GPU the results are cached in ``<cache dir>/baselines.json`` (the cache dir of
hardware.py) keyed by device name, problem key (kind + a hash of the reference and eager
source, or of the problem file), shape and dtype, so the slow max-autotune compile happens once
per shape.
On the CPU only eager is timed (``compile_us`` None) and nothing is cached: interpreter numbers
are cheap and meaningless.  A compile failure is recorded as None with a note and never fails
an evaluation.
"""
from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ..files import write_text_atomic
from ..hardware import cache_dir
from ..problems.base import Problem, Shape, dtype_name, format_shape
from .timing import Timer, median

COMPILE_MODE = "max-autotune-no-cudagraphs"


class NoRoom(Exception):
    """The input sets for the baselines do not fit in memory (the message says why)."""


@dataclass
class Baseline:
    eager_us: float | None
    compile_us: float | None
    note: str = ""


def problem_key(problem: Problem) -> str:
    try:
        text = inspect.getsource(problem.reference)
        if problem.eager is not None:
            text += inspect.getsource(problem.eager)
    except (OSError, TypeError):
        text = ""
    source = problem.source
    if source and Path(source.split(":", 1)[-1]).is_file():
        text += Path(source.split(":", 1)[-1]).read_text(errors="replace")
    return f"{problem.kind}:{hashlib.sha1(text.encode()).hexdigest()[:12]}"


def _cache_file() -> Path:
    return cache_dir() / "baselines.json"


def _load() -> dict[str, Any]:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def _store(key: str, entry: dict[str, Any]) -> None:
    data = _load()
    data[key] = entry
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only cache only costs time


def _time(fn: Callable[..., Any], sets: list[tuple], timer: Timer) -> float:
    with torch.no_grad():
        return median(timer.measure(lambda i: fn(*sets[i % len(sets)]), len(sets)))


def cached_baseline(problem: Problem, device_name: str, shape: Shape, dtype: torch.dtype) -> Baseline | None:
    """What the cache holds for this problem, device, shape and dtype (None: never timed here)."""
    cached = _load().get(f"{device_name}|{problem_key(problem)}|{format_shape(shape)}|{dtype_name(dtype)}")
    if cached is None:
        return None
    return Baseline(cached.get("eager_us"), cached.get("compile_us"), cached.get("note", ""))


def baseline(problem: Problem, device: str, device_name: str, shape: Shape, dtype: torch.dtype,
             sets: list[tuple] | Callable[[], list[tuple]], timer: Timer) -> Baseline:
    """``sets``: the input sets, or a function that draws them (called only when something is
    timed; it may raise ``NoRoom``)."""
    gpu = device.startswith("cuda")
    eager_op = problem.eager or problem.reference
    key = f"{device_name}|{problem_key(problem)}|{format_shape(shape)}|{dtype_name(dtype)}"
    cached = _load().get(key) if gpu else None
    if cached is not None:
        return Baseline(cached.get("eager_us"), cached.get("compile_us"), cached.get("note", ""))
    try:
        sets = sets() if callable(sets) else sets
    except NoRoom as exc:
        return Baseline(None, None, str(exc))
    if not gpu:
        try:
            return Baseline(_time(eager_op, sets, timer), None, "eager only on the CPU")
        except Exception as exc:  # the reference is the problem author's code
            return Baseline(None, None, f"eager reference failed: {type(exc).__name__}: {exc}")
    notes = []
    try:
        eager = _time(eager_op, sets, timer)
    except Exception as exc:
        eager = None
        notes.append(f"eager failed: {type(exc).__name__}: {exc}")
    compiled_us = None
    try:
        import torch._dynamo

        torch._dynamo.reset()  # a fresh compile per shape (no recompile limit, no dynamic shapes)
        compiled = torch.compile(eager_op, mode=COMPILE_MODE, dynamic=False)
        compiled_us = _time(compiled, sets, timer)
    except Exception as exc:
        notes.append(f"torch.compile failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    entry = {"eager_us": eager, "compile_us": compiled_us, "note": "; ".join(notes)}
    _store(key, entry)
    return Baseline(eager, compiled_us, entry["note"])
