"""End-to-end check of a run: the patched model against the original (``autokernel verify``).

1. Build the model the run was made for (from ``run.json``, else from ``plan.json``).
2. ``apply`` the run's best kernels; compare patched and original outputs on fresh inputs
   (several seeds) by the relative norm ``||patched - original|| / ||original||`` with a
   dtype-aware bound (``END_TO_END_TOLERANCE``).  Pass or fail.
3. Time the whole forward pass: eager, patched, and on a GPU ``torch.compile`` of both
   (mode ``max-autotune-no-cudagraphs``): all built first, then timed in interleaved rounds
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

Writes ``<workdir>/verify.json`` (``VerifyResult``).
"""
from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from .files import write_text_atomic
from .integrate import IntegrateError, as_float, best_rows, load_workdir_plan, read_results
from .integrate.cudagraphs import without_graphs
from .model_timing import time_forwards, time_interleaved
from .orchestrator import amdahl
from .plan import Plan
from .problems.base import dtype_name

# Relative-norm bound on the model output (logits), per dtype.  A whole model accumulates
# the rounding of every replaced op, so this is looser than the per-kernel tolerances.
END_TO_END_TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 2e-2}
CPU_TIMING_NOTE = "interpreter/cpu — not GPU performance"
CPU_BREAKDOWN_NOTE = "kernels ran under the Triton interpreter: not GPU performance"


class VerifyError(ValueError):
    """A workdir that cannot be verified (user mistake, exit code 2)."""


@dataclass
class KernelPrediction:
    problem: str
    kind: str
    fraction: float
    speedup_vs_eager: float | None
    speedup_vs_start: float | None
    amdahl_vs_eager: float | None  # 1/((1-f)+f/s) with s = speedup_vs_eager
    amdahl_vs_start: float | None  # the same with s = speedup_vs_start
    applied: bool


@dataclass
class BreakdownRow:
    problem: str
    kind: str
    before_us: float  # per forward pass, from plan.json
    after_us: float  # per forward pass, profiled on the patched model
    before_fraction: float
    after_fraction: float
    applied: bool  # the problem's kernel ran in the patched model
    after_op_us: float = 0.0  # the part of after_us spent in the problem's kernel (custom op)


@dataclass
class Breakdown:
    """Where a forward pass's time goes, per plan problem, before and after the run."""

    time_kind: str  # of the "after" profile: "gpu" (device kernels) | "cpu" (CPU op time)
    before_time_kind: str  # of the "before" profile
    rows: list[BreakdownRow] = field(default_factory=list)
    uncovered_before_us: float = 0.0  # time no plan problem covers ("not covered")
    uncovered_after_us: float = 0.0
    uncovered_before_fraction: float = 0.0
    uncovered_after_fraction: float = 0.0
    uncovered_after_top: list[tuple[str, float]] = field(default_factory=list)  # largest uncovered ops after
    total_before_us: float = 0.0
    total_after_us: float = 0.0
    warmup: int = 0
    iters: int = 0
    note: str = ""
    before_source: str = "plan.json"  # "original model" (profiled next to the patched one); older runs: the plan

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Breakdown":
        d = dict(d)
        d["rows"] = [BreakdownRow(**r) for r in d.get("rows", [])]
        d["uncovered_after_top"] = [(str(name), float(us)) for name, us in d.get("uncovered_after_top", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class VerifyResult:
    passed: bool
    model: str
    dtype: str
    device: str
    device_name: str = ""
    input_shape: list[int] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    tolerance: float = 0.0
    errors: list[float] = field(default_factory=list)  # relative-norm error per seed
    replaced: list[list[str]] = field(default_factory=list)  # [module, kind]
    skipped: list[list[str]] = field(default_factory=list)  # [problem or module, reason]
    op_calls: dict[str, int] = field(default_factory=dict)  # problem -> kernel calls per forward
    under_compile: dict[str, str] = field(default_factory=dict)  # problem -> what it runs under torch.compile, and why
    timing_kind: str = ""  # "gpu" | "cpu"
    timing_note: str = ""
    eager_ms: float | None = None
    patched_ms: float | None = None
    compile_ms: float | None = None
    compile_patched_ms: float | None = None
    compile_note: str = ""
    compile_mode: str = ""  # torch.compile's mode (or backend) of compile_ms and compile_patched_ms
    # the same models (eager, patched, compile, compile_patched) timed back to back and as GPU
    # work alone (model_timing.ForwardTimes; GPU only): the ms fields above are from idle
    back_to_back_ms: dict[str, float] = field(default_factory=dict)
    gpu_only_ms: dict[str, float] = field(default_factory=dict)
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    compile_patched_vs_compile: float | None = None
    # torch.compile of the patched model timed again with every op handed to inductor, when the
    # first timing (each op as under_compile=auto chose) was slower than of the original: what
    # apply(under_compile="auto") then follows (integrate.compile_policy.ModelChoice)
    compile_choice: dict[str, Any] | None = None
    # the patched model timed without each kernel, and the kernels it is faster without: what
    # apply(in_model="auto") leaves out (integrate.in_model.InModelChoice); None where not timed
    # and no earlier verify's choice was followed
    in_model_choice: dict[str, Any] | None = None
    predictions: list[KernelPrediction] = field(default_factory=list)
    predicted_vs_eager: float | None = None
    # a model that failed: each applied problem's kernel alone, its relative error on the worst
    # seed (which kernel the failure is owed to)
    errors_alone: dict[str, float] = field(default_factory=dict)
    breakdown: Breakdown | None = None
    message: str = ""
    created: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VerifyResult":
        d = dict(d)
        d["predictions"] = [KernelPrediction(**p) for p in d.get("predictions", [])]
        if d.get("breakdown") is not None:
            d["breakdown"] = Breakdown.from_dict(d["breakdown"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


# ------------------------------------------------------------------ pure arithmetic
def amdahl_many(parts: list[tuple[float, float]]) -> float:
    """Several disjoint parts ``(fraction, speedup)`` at once."""
    rest = 1.0 - sum(f for f, _ in parts)
    return 1.0 / (rest + sum(f / s for f, s in parts))


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


def predictions(plan: Plan, rows: list[dict[str, str]], applied: set[str]) -> tuple[list[KernelPrediction], float | None]:
    best = best_rows(rows)
    out, parts = [], []
    for p in plan.supported:
        row = best.get(p.name, {})
        s_e, s_s = as_float(row.get("speedup_vs_eager")), as_float(row.get("speedup_vs_start"))
        a_e = amdahl(p.fraction, s_e) if s_e else None
        a_s = amdahl(p.fraction, s_s) if s_s else None
        out.append(KernelPrediction(p.name, p.kind, p.fraction, s_e, s_s, a_e, a_s, p.name in applied))
        if p.name in applied and s_e:
            parts.append((p.fraction, s_e))
    total = amdahl_many(parts) if parts else None
    return out, total


def capped_shares(parts: list[float], total: float) -> list[float]:
    """``part / total`` for each part, each at most 1, summing to at most 1 (floating-point
    excess is taken off the largest share)."""
    shares = [min(1.0, max(0.0, x) / total) if total > 0 else 0.0 for x in parts]
    excess = sum(shares) - (1.0 - 1e-12)
    if shares and excess > 0:
        i = max(range(len(shares)), key=shares.__getitem__)
        shares[i] = max(0.0, shares[i] - excess)
    return shares


def top_ops(times: dict[str, float], n: int = 5) -> list[tuple[str, float]]:
    return sorted(times.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def make_breakdown(plan: Plan, after: Any, applied: set[str], before: Any) -> Breakdown:
    """``profiler.ProblemTimes`` of the original model (before) and of the patched one (after),
    per plan problem.  Both are profiled in the same verify: the plan's own times were measured
    earlier, under other conditions (clocks and temperature differ)."""
    names = [p.name for p in plan.problems]
    after_parts = [after.problems.get(n, 0.0) for n in names] + [after.uncovered_us]
    after_shares = capped_shares(after_parts, after.total_us)
    before_parts = [before.problems.get(n, 0.0) for n in names] + [before.uncovered_us]
    before_total, before_kind = before.total_us, before.time_kind
    before_shares = capped_shares(before_parts, before_total)
    rows = [BreakdownRow(problem=p.name, kind=p.kind, before_us=before_parts[i], after_us=after_parts[i],
                         before_fraction=before_shares[i], after_fraction=after_shares[i],
                         applied=p.name in applied, after_op_us=after.op_us.get(p.name, 0.0))
            for i, p in enumerate(plan.problems)]
    notes = []
    if after.time_kind != "gpu":
        notes.append(CPU_BREAKDOWN_NOTE)
    if after.time_kind != before_kind:
        notes.append(f"before is {before_kind} time and after is {after.time_kind} time: not comparable")
    return Breakdown(time_kind=after.time_kind, before_time_kind=before_kind, rows=rows,
                     uncovered_before_us=before_parts[-1], uncovered_after_us=after.uncovered_us,
                     uncovered_before_fraction=before_shares[-1], uncovered_after_fraction=after_shares[-1],
                     uncovered_after_top=top_ops(after.uncovered_ops),
                     total_before_us=before_total, total_after_us=after.total_us,
                     warmup=after.warmup, iters=after.iters, note="; ".join(notes),
                     before_source="original model")


def device_error(dev: str, asked: str | None, run_device: str | None) -> str:
    """Why a CUDA device cannot be used here, naming who chose it: the user or the run."""
    if asked:
        made_on = f" (the run was made on {run_device})" if run_device else ""
        return f"--device {asked}: no GPU is available here{made_on}; use --device cpu"
    return f"the run was made on {dev} but no GPU is available here (use --device cpu)"


# ------------------------------------------------------------------ the run's model
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


def _compiled(model: torch.nn.Module, inputs: tuple, mode: str | None, backend: str | None):
    kwargs: dict[str, Any] = {}
    if backend:
        kwargs["backend"] = backend
    elif mode:
        kwargs["mode"] = mode
    compiled = torch.compile(model, **kwargs)
    compiled(*inputs)  # compile now, so that the timing below is of the compiled code
    return compiled


IN_MODEL_MODES = ("auto", "all", "measure")
COMPILE_MODES = ("max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead", "default")


def compile_mode_for(cuda_graphs: bool, given: str | None = None) -> str:
    """torch.compile's mode verify compares with: ``given``, else like for like, the strongest
    mode without CUDA graphs for a patched model outside graphs, and the same autotuning with
    torch.compile's own CUDA graphs for a patched model in CUDA-graph mode."""
    if given is not None:
        return given
    return "max-autotune" if cuda_graphs else "max-autotune-no-cudagraphs"


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
    model without each kernel (on a GPU outside CUDA graphs, when timing) and goes on without those
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
    measure = in_model == "measure" or (in_model == "auto" and timing and dev.startswith("cuda") and not cuda_graphs)
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
            warmup=warmup if gpu else 1, rounds=iters if gpu else 3, gpu=gpu, dev=dev, say=say)
    info = summary(patched)
    say(f"replaced: {len(info['replaced'])} place(s); skipped: {len(info['skipped'])}")
    for what, why in info["skipped"]:
        say(f"  skipped {what}: {why}")
    under = getattr(patched, "_autokernel_under_compile", {}) or {}
    if compile and timing and under:
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
                calls_per_forward = {name: OP_CALLS[op] - before.get(op, 0) for name, op in info["ops"].items()}
            errors.append(rel_error(out, ref))
            say(f"seed {seed}: relative error {errors[-1]:.2e} (bound {tol:.0e})")
    passed = all(e <= tol for e in errors)
    alone = {} if passed or len(info["ops"]) < 2 else _errors_alone(
        original, workdir, sorted(info["ops"]), loaded.make_inputs(seeds[errors.index(max(errors))]), say, tol)
    result = VerifyResult(passed=passed, model=cfg["model"], dtype=dkey, device=dev,
                          device_name=torch.cuda.get_device_name(torch.device(dev)) if dev.startswith("cuda") else "cpu",
                          input_shape=list(loaded.input_shape), seeds=list(seeds), tolerance=tol, errors=errors,
                          replaced=info["replaced"], skipped=info["skipped"], op_calls=calls_per_forward,
                          errors_alone=alone,
                          in_model_choice=_followed(patched),
                          under_compile=dict(under), created=time.strftime("%Y-%m-%d %H:%M:%S"))
    never = [n for n, c in calls_per_forward.items() if c == 0]
    notes = []
    if not info["replaced"]:
        notes.append("no kernel was put into the model: the patched model is the original")
    if alone:
        over = [name for name, e in alone.items() if not e <= tol]
        notes.append(("alone over the bound: " + ", ".join(f"{n} ({alone[n]:.1e})" for n in over)) if over else
                     "no kernel alone is over the bound: their errors add up")
    if never:
        notes.append(f"installed but not called on these inputs: {', '.join(never)}")
    if timing:
        say("timing eager and patched models" + ("" if dev.startswith("cuda") else " (interpreter: slow)") + "...")
        _time_models(result, original, patched, loaded.make_inputs(seeds[0] if seeds else 0), dev,
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


def _time_models(result: VerifyResult, original, patched, inputs: tuple, dev: str, compile: bool,
                 compile_mode: str, compile_backend: str | None, warmup: int, iters: int, say,
                 second_compile: bool = False) -> None:
    """Every model is built (torch.compile included) before any is timed; then all are timed
    together in interleaved rounds, from idle, back to back and as GPU work alone
    (``model_timing.time_forwards``), the GPU's clocks ramped up first."""
    from .profiler import intra_op_threads

    gpu = dev.startswith("cuda")
    if not gpu:  # the interpreter is slow: a few calls say enough about CPU wall time
        warmup, iters = min(warmup, 1), min(iters, 3)
    result.timing_kind = "gpu" if gpu else "cpu"
    result.timing_note = "" if gpu else CPU_TIMING_NOTE
    with torch.inference_mode():
        models = {"eager": lambda: original(*inputs), "patched": lambda: patched(*inputs)}
        ops = getattr(patched, "_autokernel_kernel_ops", [])
        if compile and gpu:
            how = compile_backend or compile_mode
            result.compile_mode = how
            try:
                say(f"torch.compile ({how}) of the original (this can take minutes)...")
                c_orig = _compiled(original, inputs, compile_mode, compile_backend)
                models["compile"] = lambda: c_orig(*inputs)
                if second_compile and ops:  # measured afresh: the per-op choice first, whatever was recorded
                    _per_op_choice(result, patched, ops)
                say(f"torch.compile ({how}) of the patched model...")
                c_patched = _compiled(without_graphs(patched), inputs, compile_mode, compile_backend)
                models["compile_patched"] = lambda: c_patched(*inputs)
            except Exception as exc:  # a measurement that could not be made, reported as such
                result.compile_note = f"torch.compile failed: {_first_line(exc)}"
                say(result.compile_note)
        elif compile:
            result.compile_note = "torch.compile timings are taken on GPU only"
        say(f"timing {', '.join(models)} in {iters} rotated rounds"
            + (" (from idle, back to back, GPU work alone)..." if gpu else " (one intra-op thread)..."))
        # on a CPU, one intra-op thread, as the profile runs: on 2 busy cores a forward that fanned
        # out took 300 ms one round and 2 ms the next, and a patched model identical to the
        # original timed 6.5x faster than it
        with intra_op_threads(None if gpu else 1):
            ways = time_forwards(models, warmup, iters, gpu, dev)
        times = ways.idle
        result.back_to_back_ms, result.gpu_only_ms = ways.back_to_back, ways.gpu_only
        if ways.waits_for_gpu:
            note = (f"GPU work alone not measured for {', '.join(ways.waits_for_gpu)}: the forward waits for the GPU "
                    "on the way (a host sync)")
            result.timing_note = f"{result.timing_note}; {note}" if result.timing_note else note
            say(note)
        result.eager_ms, result.patched_ms = times["eager"], times["patched"]
        result.compile_ms, result.compile_patched_ms = times.get("compile"), times.get("compile_patched")
        say(f"eager {result.eager_ms:.3f} ms, patched {result.patched_ms:.3f} ms"
            + ("" if gpu else f" ({CPU_TIMING_NOTE})"))
        if result.compile_ms is not None:
            say(f"torch.compile: original {result.compile_ms:.3f} ms"
                + ("" if result.compile_patched_ms is None else f", patched {result.compile_patched_ms:.3f} ms"))
        if second_compile and ops and result.compile_patched_ms is not None:
            per_op_ms = result.compile_patched_ms
            try:
                _compile_again(result, patched, ops, inputs, compile_mode, compile_backend,
                               lambda fn: _on_the_rounds_scale(fn, models["patched"], result.patched_ms, warmup,
                                                               iters, gpu, dev), say)
            except Exception as exc:  # the first measurement stands
                result.compile_note = f"torch.compile failed: {_first_line(exc)}"
                say(result.compile_note)
            if result.compile_patched_ms != per_op_ms:  # another way won, timed from idle only
                result.back_to_back_ms.pop("compile_patched", None)
                result.gpu_only_ms.pop("compile_patched", None)
    if result.eager_ms and result.patched_ms:
        result.speedup_vs_eager = result.eager_ms / result.patched_ms
    if result.compile_ms and result.patched_ms:
        result.speedup_vs_compile = result.compile_ms / result.patched_ms
    if result.compile_ms and result.compile_patched_ms:
        result.compile_patched_vs_compile = result.compile_ms / result.compile_patched_ms


# a forward whose time from idle is this many times its GPU work is waiting on its host
LAUNCH_BOUND = 1.5


def launch_bound_note(result: VerifyResult) -> str:
    """Advice where the patched forward is launch-bound (GPU timing only): its time from idle at
    least ``LAUNCH_BOUND`` times its GPU work alone.  There each op we switch adds host time,
    whatever its GPU time (hf:bert at 4x512 tokens: 10.2 ms patched against 7.4 eager, for 1.5 ms
    of GPU work), and a captured CUDA graph takes the host out."""
    idle, alone = result.patched_ms, result.gpu_only_ms.get("patched")
    if not idle or not alone or idle < LAUNCH_BOUND * alone:
        return ""
    return (f"the patched forward is launch-bound here ({idle:.2f} ms from idle for {alone:.2f} ms of GPU work): "
            "each switched op adds host time; run it as a CUDA graph (verify --cuda-graphs, "
            "apply(..., cuda_graphs=True)) to take the host out")


def _first_line(exc: BaseException) -> str:
    """An exception for a note: its type and the first line of its message (200 characters)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


def _on_the_rounds_scale(fn, patched_fn, patched_ms: float, warmup: int, rounds: int, gpu: bool, dev: str) -> float:
    """ms a call of ``fn`` (a compile of the patched model made after the main rounds, which
    cannot be timed with the compile of the original: dynamo was reset for it), timed in rounds
    with the patched model and put on the main rounds' scale through it."""
    times = time_interleaved({"variant": fn, "patched": patched_fn}, warmup, rounds, gpu, dev)
    return times["variant"] * patched_ms / times["patched"]


def _compile_again(result: VerifyResult, patched, ops: list, inputs: tuple, compile_mode: str,
                   compile_backend: str | None, timer: Callable, say) -> None:
    """torch.compile of the patched model (each op as ``auto`` chose per op) was timed.  Where it
    lost to torch.compile of the original, time it again with every op handed to inductor; where
    the faster of those still lost to the patched model uncompiled, time torch.compile of the
    patched model left out of the compile.  Keep the fastest, and record what was timed for
    ``apply(under_compile="auto")``."""
    from .integrate.compile_policy import ModelChoice, kernel_digests, leave_uncompiled, set_policies, whole_model_policy

    per_op_ms = result.compile_patched_ms
    eager_ms = uncompiled_ms = None
    if result.compile_ms is not None and per_op_ms > result.compile_ms:
        eager_ms = _compile_handed_over(result, patched, ops, inputs, compile_mode, compile_backend, timer, say)
    fastest = min(ms for ms in (per_op_ms, eager_ms) if ms is not None)
    if result.patched_ms is not None and fastest > result.patched_ms:
        uncompiled_ms = _compile_left_out(result, patched, inputs, compile_mode, compile_backend, timer, say)
    if eager_ms is None and uncompiled_ms is None:
        return
    choice = ModelChoice(whole_model_policy(per_op_ms, eager_ms, uncompiled_ms), per_op_ms, eager_ms,
                         result.device_name, kernel_digests(ops), uncompiled_ms, without_graphs(patched) is not patched)
    result.compile_choice = choice.to_dict()
    result.under_compile = set_policies(ops, "auto", result.device_name, choice)
    if choice.policy == "uncompiled":
        leave_uncompiled(patched)
    result.compile_patched_ms = min(ms for ms in (per_op_ms, eager_ms, uncompiled_ms) if ms is not None)
    follows = {"eager": "hands every op over", "uncompiled": "leaves the patched model out of torch.compile",
               "per-op": "keeps the per-op choice"}[choice.policy]
    say(f"apply(under_compile='auto') now {follows} on this machine")


def _per_op_choice(result: VerifyResult, patched, ops: list) -> None:
    """The patched model as ``apply(under_compile="auto")`` leaves it with no earlier verify's
    choice: each op as chosen per op, the model compiled with them."""
    from .integrate.compile_policy import compile_again, set_policies

    compile_again(patched)
    result.under_compile = set_policies(ops, "auto", result.device_name)


def _compile_handed_over(result: VerifyResult, patched, ops: list, inputs: tuple, compile_mode: str,
                         compile_backend: str | None, timer: Callable, say) -> float | None:
    """torch.compile of the patched model with every op handed to inductor (the eager op
    traced), ms a forward; None where it could not be made (the note says why)."""
    import torch._dynamo

    from .integrate.compile_policy import set_policies

    set_policies(ops, "eager", result.device_name)
    torch._dynamo.reset()  # traced afresh: the first compile's graphs hold our ops
    try:
        handed = _compiled(without_graphs(patched), inputs, compile_mode, compile_backend)
        eager_ms = timer(lambda: handed(*inputs))
    except Exception as exc:  # the first measurement stands; this one could not be made
        result.compile_note = f"torch.compile with every op handed to inductor failed: {_first_line(exc)}"
        say(result.compile_note)
        return None
    finally:
        set_policies(ops, "auto", result.device_name)
    say(f"torch.compile of the patched model with every op handed to inductor: {eager_ms:.3f} ms "
        f"({result.compile_patched_ms:.3f} with the ops chosen one by one)")
    return eager_ms


def _compile_left_out(result: VerifyResult, patched, inputs: tuple, compile_mode: str, compile_backend: str | None,
                      timer: Callable, say) -> float | None:
    """torch.compile of the patched model left out of the compile (it runs as it is: in CUDA-graph
    mode the wrapper replays its graphs), ms a forward; None where it could not be made."""
    import torch._dynamo

    from .integrate.compile_policy import compile_again, leave_uncompiled

    model = patched
    leave_uncompiled(model)
    torch._dynamo.reset()
    try:
        left_out = _compiled(model, inputs, compile_mode, compile_backend)
        uncompiled_ms = timer(lambda: left_out(*inputs))
    except Exception as exc:
        result.compile_note = f"torch.compile of the patched model left uncompiled failed: {_first_line(exc)}"
        say(result.compile_note)
        return None
    finally:
        compile_again(model)
    say(f"torch.compile of the patched model left out of the compile: {uncompiled_ms:.3f} ms "
        f"(the patched model {result.patched_ms:.3f} ms)")
    return uncompiled_ms


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
        say(f"time breakdown failed: {_first_line(exc)}")
        return None
    result = make_breakdown(plan, after, applied, before)
    say(f"time breakdown: {result.total_before_us:.1f} us before, {result.total_after_us:.1f} us after "
        f"({result.time_kind} time per forward" + (f"; {result.note}" if result.note else "") + ")")
    return result


def load_verify(workdir: str | Path) -> VerifyResult | None:
    path = Path(workdir) / "verify.json"
    if not path.is_file():
        return None
    try:
        return VerifyResult.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError):
        return None
