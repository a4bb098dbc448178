"""End-to-end check of a run: the patched model against the original (``autokernel verify``).

1. Build the model the run was made for (from ``run.json``, else from ``plan.json``).
2. ``apply`` the run's best kernels; compare patched and original outputs on fresh inputs
   (several seeds) by the relative norm ``||patched - original|| / ||original||`` with a
   dtype-aware bound (``END_TO_END_TOLERANCE``).  Pass or fail; a half-precision model over
   the bound passes where it is no further from the original run in fp32 than the original
   itself is (``verify_precision``: BLOOM's bf16 scores are 4.4e-2 from fp32).
3. Time the whole forward pass: eager, patched, and on a GPU ``torch.compile`` of both
   (mode ``max-autotune-no-cudagraphs``; ``max-autotune``, with its CUDA graphs, in CUDA-graph
   mode): all built first, then timed in interleaved rounds
   with the GPU's clocks ramped up, each forward from idle between CUDA events, the median of
   each (``model_timing``).  On CPU only eager and patched are timed, by wall clock, and marked
   as interpreter/CPU timings.
4. Put the measured speedup next to Amdahl's prediction from the plan fractions and each
   problem's best speedups in ``results.tsv``.
5. The time breakdown before/after: the patched model is profiled like ``autokernel profile``
   profiles a model (device kernel time on a GPU, with the same warm-up and passes; CPU op
   time on a CPU, one pass) and its time is put on the plan's problems — a problem's custom
   op counts for it, the rest goes through the recognizers, so a problem whose kernel was not
   applied keeps its original time — next to the plan's times (the profile the run started
   from).  ``verify(..., breakdown=False)`` / ``--no-breakdown`` skips it.

Writes ``<workdir>/verify.json`` (``VerifyResult``).  The records and their arithmetic are in
``verify_records``, step 3 in ``verify_timing``.
"""
from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from .files import write_text_atomic
from .integrate import IntegrateError, load_workdir_plan, read_results
from .orchestrator import amdahl
from .plan import Plan
from .problems.base import dtype_name
from .verify_precision import HALF_PRECISION, FullPrecisionCheck, full_precision_check
from .verify_records import (Breakdown, BreakdownRow, KernelPrediction, VerifyResult, amdahl_many, load_verify,
                             make_breakdown, predictions)
from .verify_timing import COMPILE_MODES, compile_mode_for, first_line, launch_bound_note, time_models

# the API of verify, its records and its timing, as other modules and users import it
__all__ = ["END_TO_END_TOLERANCE", "COMPILE_MODES", "IN_MODEL_MODES", "Breakdown", "BreakdownRow", "KernelPrediction",
           "VerifyError", "VerifyResult", "amdahl", "amdahl_many", "compile_mode_for", "device_error", "load_verify",
           "predictions", "rel_error", "run_config", "verify"]

# Relative-norm bound on the model output (logits), per dtype.  A whole model accumulates
# the rounding of every replaced op, so this is looser than the per-kernel tolerances.
END_TO_END_TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 2e-2}


class VerifyError(ValueError):
    """A workdir that cannot be verified (user mistake, exit code 2)."""


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float64; inf when shapes differ or values are not finite."""
    if out.shape != ref.shape:
        return float("inf")
    out, ref = out.detach().double(), ref.detach().double()
    if not torch.isfinite(out).all() and torch.isfinite(ref).all():
        return float("inf")
    denom = ref.norm().item()
    err = (out - ref).norm().item() / (denom if denom > 0 else 1.0)
    return err if err == err else float("inf")


def device_error(dev: str, asked: str | None, run_device: str | None) -> str:
    """Why a CUDA device cannot be used here, naming who chose it: the user or the run."""
    if asked:
        made_on = f" (the run was made on {run_device})" if run_device else ""
        return f"--device {asked}: no GPU is available here{made_on}; use --device cpu"
    return f"the run was made on {dev} but no GPU is available here (use --device cpu)"


def run_config(workdir: Path, plan: Plan) -> dict[str, Any]:
    """How the model was built: ``run.json`` written by ``autokernel run``, else the plan."""
    cfg: dict[str, Any] = {"model": plan.model, "dtype": plan.dtype, "device": plan.device,
                           "input_shape": list(plan.input_shape), "config": dict(plan.config),
                           "padded": plan.padded}
    path = Path(workdir) / "run.json"
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise VerifyError(f"{path} is not valid JSON: {exc}") from None
        cfg.update({k: saved[k] for k in ("model", "dtype", "device", "input_shape", "config", "padded") if k in saved})
    return cfg


IN_MODEL_MODES = ("auto", "all", "measure")


def verify(workdir: str | Path, *, seeds: tuple[int, ...] = (0, 1, 2), timing: bool = True,
           compile: bool = True, compile_mode: str | None = None,
           compile_backend: str | None = None, warmup: int = 3, iters: int = 20,
           device: str | None = None, log: Callable[[str], None] | None = None,
           write: bool = True, breakdown: bool = True, breakdown_warmup: int | None = None,
           breakdown_iters: int | None = None, cuda_graphs: bool = False,
           under_compile: str = "auto", in_model: str = "auto") -> VerifyResult:
    """Check and time the patched model of the run in ``workdir``; see the module docstring.

    ``compile_mode``: torch.compile's mode, by default ``compile_mode_for(cuda_graphs)`` (CUDA
    graphs against CUDA graphs).  ``compile_backend`` (e.g. ``"aot_eager"``) replaces it — for tests on
    machines where inductor is too slow.  ``breakdown`` (with ``timing``): profile the
    patched model for the time breakdown before/after, on a GPU with the profiler's warm-up
    and passes (on CPU one of each) unless ``breakdown_warmup``/``breakdown_iters`` say
    otherwise.  ``cuda_graphs``: the patched model runs as a captured CUDA graph (GPU only).
    ``under_compile``: what each op runs while torch.compile traces the patched model
    (``integrate.compile_policy``: auto, ours, eager).  ``in_model``: ``auto`` times the patched
    model without each kernel (on a GPU, when timing; in CUDA-graph mode each variant captured) and goes on without those
    it ran slower with, recording the choice for ``apply`` (``integrate.in_model``); elsewhere it
    follows the last verify's choice.  ``all``: every selected kernel, nothing recorded.
    ``measure``: time the choice wherever verify runs (tests: the interpreter's times mean nothing).
    Raises ``VerifyError`` on a workdir that cannot be verified."""
    from .integrate import OP_CALLS, apply, summary
    from .models import ModelSpecError, load_model, output_tensor
    from .problems.base import parse_dtype

    say = log or (lambda _msg: None)
    workdir = Path(workdir)
    if in_model not in IN_MODEL_MODES:
        raise VerifyError(f"in_model must be one of {', '.join(IN_MODEL_MODES)}; got {in_model!r}")
    try:
        plan = load_workdir_plan(workdir)
    except (IntegrateError, ValueError) as exc:
        raise VerifyError(str(exc)) from None
    cfg = run_config(workdir, plan)
    dev = device or cfg["device"] or "cpu"
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise VerifyError(device_error(dev, device, cfg["device"]))
    if cuda_graphs and not dev.startswith("cuda"):
        raise VerifyError(f"--cuda-graphs needs a GPU run; this one is on {dev}")
    if not dev.startswith("cuda"):
        # Triton kernels run on CPU tensors only under the interpreter; the flag is read when
        # a kernel file is imported, which apply() does below.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        dtype = parse_dtype(cfg["dtype"])
        loaded = load_model(cfg["model"], dtype=dtype, device=dev, input_shape=cfg["input_shape"] or None,
                            config_overrides=cfg.get("config") or None, padded=bool(cfg.get("padded")))
    except (ModelSpecError, ValueError) as exc:
        raise VerifyError(str(exc)) from None
    say(f"model: {loaded.description}")
    original = loaded.model.eval()
    measure = in_model == "measure" or (in_model == "auto" and timing and dev.startswith("cuda"))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            patched = apply(original, workdir, cuda_graphs=cuda_graphs, under_compile=under_compile,
                            in_model="all" if measure else in_model)
    except IntegrateError as exc:
        raise VerifyError(str(exc)) from None
    for w in caught:
        say(f"warning: {w.message}")
    if measure:
        from .hardware import current_device_name
        from .in_model_timing import choose_in_model

        gpu = dev.startswith("cuda")
        patched = choose_in_model(
            original, workdir, patched, loaded.make_inputs(seeds[0] if seeds else 0),
            device_name=current_device_name(dev) if gpu else "cpu", under_compile=under_compile,
            warmup=warmup if gpu else 1, rounds=iters if gpu else 3, gpu=gpu, dev=dev, say=say,
            cuda_graphs=cuda_graphs)
    info = summary(patched)
    say(f"replaced: {len(info['replaced'])} place(s); skipped: {len(info['skipped'])}")
    for what, why in info["skipped"]:
        say(f"  skipped {what}: {why}")
    under = getattr(patched, "_autokernel_under_compile", {}) or {}
    if compile and timing and under and dev.startswith("cuda"):  # torch.compile is timed on a GPU only
        for name, why in sorted(under.items()):
            say(f"  under torch.compile, {name}: {why}")
    say(f"checking correctness on {len(seeds)} seed(s)...")

    dkey = next((k for k in (cfg["dtype"], dtype_name(dtype)) if k in END_TO_END_TOLERANCE), "fp32")
    tol = END_TO_END_TOLERANCE[dkey]
    errors: list[float] = []
    calls_per_forward: dict[str, int] = {}
    with torch.inference_mode():
        for i, seed in enumerate(seeds):
            inputs = loaded.make_inputs(seed)
            ref = output_tensor(original(*inputs))
            before = dict(OP_CALLS)
            out = output_tensor(patched(*inputs))
            if i == 0:
                calls_per_forward = ops_called(patched, inputs, info["ops"], before)
            errors.append(rel_error(out, ref))
            say(f"seed {seed}: relative error {errors[-1]:.2e} (bound {tol:.0e})")
    passed = all(e <= tol for e in errors)
    yardstick = None
    if not passed and dkey in HALF_PRECISION:
        say(f"over the bound: measuring the patched and the original {dkey} model against the original in fp32...")
        yardstick = full_precision_check(original, patched, loaded.make_inputs, list(seeds), rel_error, output_tensor,
                                         tol)
        say(f"  {yardstick.summary() if isinstance(yardstick, FullPrecisionCheck) else yardstick}")
        passed = isinstance(yardstick, FullPrecisionCheck) and yardstick.passed(tol)
    alone = {} if passed or len(info["ops"]) < 2 else _errors_alone(
        original, workdir, sorted(info["ops"]), loaded.make_inputs(seeds[errors.index(max(errors))]), say, tol)
    result = VerifyResult(passed=passed, model=cfg["model"], dtype=dkey, device=dev,
                          device_name=torch.cuda.get_device_name(torch.device(dev)) if dev.startswith("cuda") else "cpu",
                          input_shape=list(loaded.input_shape), seeds=list(seeds), tolerance=tol, errors=errors,
                          replaced=info["replaced"], skipped=info["skipped"], op_calls=calls_per_forward,
                          errors_alone=alone,
                          full_precision=yardstick.to_dict() if isinstance(yardstick, FullPrecisionCheck) else None,
                          in_model_choice=_followed(patched),
                          under_compile=dict(under), created=time.strftime("%Y-%m-%d %H:%M:%S"))
    never = [n for n, c in calls_per_forward.items() if c == 0]
    notes = []
    if not info["replaced"]:
        notes.append("no kernel was put into the model: the patched model is the original")
    if isinstance(yardstick, FullPrecisionCheck):
        notes.append(("over the bound from the original, " if passed else "over the bound, ") + yardstick.summary()
                     + (f": no further from full precision than the {dkey} original itself" if passed else ""))
    elif yardstick:
        notes.append(yardstick)
    if alone:
        over = [name for name, e in alone.items() if not e <= tol]
        notes.append(("alone over the bound: " + ", ".join(f"{n} ({alone[n]:.1e})" for n in over)) if over else
                     "no kernel alone is over the bound: their errors add up")
    if never:
        notes.append(f"installed but not called on these inputs: {', '.join(never)}")
    if timing:
        say("timing eager and patched models" + ("" if dev.startswith("cuda") else " (interpreter: slow)") + "...")
        time_models(result, original, patched, loaded.make_inputs(seeds[0] if seeds else 0), dev,
                    compile, compile_mode_for(cuda_graphs, compile_mode), compile_backend, warmup, iters, say,
                    second_compile=under_compile == "auto")
    fallbacks = getattr(patched, "capture_fallbacks", None)
    if fallbacks:
        names = {op: name for name, op in info["ops"].items()}
        notes.append("while the CUDA graph was captured the model left some of our ops out (it takes another path "
                     "when a stream captures): " + ", ".join(f"{names.get(op, op)} ×{n}" for op, n in fallbacks.items()))
    if timing and not cuda_graphs:
        bound = launch_bound_note(result)
        if bound:
            notes.append(bound)
            say(f"note: {bound}")
    applied = {n for n, c in calls_per_forward.items() if c > 0}
    result.predictions, result.predicted_vs_eager = predictions(plan, read_results(workdir), applied)
    if timing and breakdown and cuda_graphs:
        notes.append("no time breakdown in CUDA-graph mode (a replayed graph has no module scopes to profile)")
    elif timing and breakdown:
        result.breakdown = _profile_breakdown(plan, original, patched, loaded.make_inputs(seeds[0] if seeds else 0), dev,
                                              applied, breakdown_warmup, breakdown_iters, say)
        if result.breakdown is None:
            notes.append("the time breakdown could not be measured (see the log)")
    result.message = "; ".join(notes)
    if write:
        write_text_atomic(workdir / "verify.json", json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def ops_called(patched, inputs: tuple, ops: dict[str, str], before: dict[str, int]) -> dict[str, int]:
    """Calls of each problem's op (``ops``: problem -> op name) in the forward just run: counted
    since ``before``, or, for a model replaying a CUDA graph (no Python runs in a replay), those
    its capture for these inputs made."""
    from .integrate import OP_CALLS

    in_graph = getattr(patched, "calls_in_graph", None)
    captured = in_graph(*inputs) if in_graph is not None else None
    if captured is not None:
        return {name: captured.get(op, 0) for name, op in ops.items()}
    return {name: OP_CALLS[op] - before.get(op, 0) for name, op in ops.items()}


def _followed(patched) -> dict[str, Any] | None:
    """The in-model choice ``patched`` follows: measured by this verify, or recorded by the last one."""
    choice = getattr(patched, "_autokernel_in_model", None)
    return None if choice is None else choice.to_dict()


def _errors_alone(original, workdir: Path, names: list[str], inputs: tuple, say, tol: float) -> dict[str, float]:
    """Each problem's kernel alone in the model: its relative error on ``inputs``."""
    from .integrate import apply
    from .models import output_tensor

    say("the patched model failed: each kernel alone...")
    out: dict[str, float] = {}
    with torch.inference_mode():
        ref = output_tensor(original(*inputs))
        for name in names:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                one = apply(original, workdir, only={name}, in_model="all")
            out[name] = rel_error(output_tensor(one(*inputs)), ref)
            say(f"  {name} alone: relative error {out[name]:.2e}" + (" (over the bound)" if not out[name] <= tol else ""))
    return out


def _profile_breakdown(plan: Plan, original, patched, inputs: tuple, dev: str, applied: set[str], warmup: int | None,
                       iters: int | None, say) -> Breakdown | None:
    from .integrate import op_problems
    from .profiler import DEFAULT_ITERS, DEFAULT_WARMUP, profile_problem_times

    gpu = dev.startswith("cuda")
    # On a GPU the profiler's own warm-up and passes, so that after is measured like before.
    # Under the interpreter one pass after one warm-up is enough (and the model has already
    # run several times here): its times are not GPU performance anyway.
    if warmup is None:
        warmup = DEFAULT_WARMUP if gpu else min(DEFAULT_WARMUP, 1)
    if iters is None:
        iters = DEFAULT_ITERS if gpu else 1
    say("profiling the original and the patched model for the time breakdown...")
    try:
        # both models now, one after the other, so that clocks and temperature are the same
        before = profile_problem_times(original, inputs, plan, device=dev, op_problems=op_problems(original),
                                       warmup=warmup, iters=iters)
        after = profile_problem_times(patched, inputs, plan, device=dev, op_problems=op_problems(patched),
                                      warmup=warmup, iters=iters)
    except Exception as exc:  # a measurement that could not be made, reported as such
        say(f"time breakdown failed: {first_line(exc)}")
        return None
    result = make_breakdown(plan, after, applied, before)
    say(f"time breakdown: {result.total_before_us:.1f} us before, {result.total_after_us:.1f} us after "
        f"({result.time_kind} time per forward" + (f"; {result.note}" if result.note else "") + ")")
    return result
