"""The whole job (``autokernel run``): profile → plan → optimize → verify → report.

Each step writes a plain file in the workdir, so a second ``run`` with the same arguments
resumes: the plan is reused when ``plan.json`` was made for the same model, dtype, input
shape and config; the loop continues where it stopped (its own resume); verify and report
are redone.  ``run.json`` records how the model was built, for ``verify`` later, and
``finished`` once the report is written: the same command on a finished run only shows its
report; ``extend_s`` (``--extend``) gives it more optimization time, then verifies and
reports again.

Budget: one wall-clock budget for the run, default 8h on a GPU and 10m on CPU (where kernels
run under the Triton interpreter and only correctness means anything).  Profiling counts
against it; verification and the report come after it and are not cut short.  A resumed run
gets what its earlier sessions left of it (``run.json`` records the time spent); ``--extend``
adds to the budget of a finished run.
"""
from __future__ import annotations

import dataclasses

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .files import write_text_atomic
from .fusion_notes import unfused_flags
from .hardware import resolve_device as hardware_resolve_device

DEFAULT_MODEL = "llama"
DEFAULT_BUDGET_GPU = "8h"
DEFAULT_BUDGET_CPU = "10m"


class PipelineError(ValueError):
    """Bad input to ``run`` (user mistake, exit code 2)."""


@dataclass
class RunOptions:
    workdir: Path
    model: str = DEFAULT_MODEL
    budget_s: float | None = None  # None: the default for the device
    input_shape: list[int] | None = None
    dtype: str | None = None  # None: bf16 on GPU, fp32 on CPU
    device: str = "auto"
    config: dict[str, Any] = field(default_factory=dict)
    agent: Any = None  # agents.base.AgentConfig
    seed: int | None = None  # None: 0 for a new run, a resumed run's own
    max_experiments: int | None = None
    timeout_s: float = 60.0
    run_name: str | None = None
    compile: bool = True  # time torch.compile in verify (GPU only)
    use_existing_repo: bool = False  # allow a git repository that is not an autokernel workspace
    extend_s: float | None = None  # a finished run: optimize this much longer, then verify and report again
    parallel: int | None = None  # experiments in flight (loop.optimize.run_optimize)
    gpus: list[int] | None = None
    ray: str | None = None
    padded: bool = False  # hf: token models: a padded batch (models.pad_inputs)
    as_captured: bool = False  # profile the forward as a CUDA graph capture runs it (profiler.as_captured)
    fused_rotary: bool = False  # plan rotary + attention as one attention_rotary problem
    fused_mlp: bool = False  # plan SwiGLU MLPs as one fused_mlp problem


@dataclass
class RunResult:
    plan_path: Path
    reused_plan: bool
    nothing_supported: bool = False
    optimize: Any = None  # loop.optimize.OptimizeSummary
    verify: Any = None  # verify.VerifyResult
    report: Any = None  # report.ReportData
    interrupted: bool = False
    finished_before: bool = False  # the run had finished already: nothing was run, its report is shown
    nothing_evaluated: bool = False  # no kernel was evaluated (the budget ended first): nothing verified


def resolve_device(device: str) -> str:
    try:
        return hardware_resolve_device(device)
    except ValueError as exc:
        raise PipelineError(str(exc)) from None


SPENT_EVERY_S = 10.0  # how often the loop's time spent is written to run.json


def _config_value(value: Any) -> Any:
    """A --config value as compared between runs: a list or JSON object by what it holds
    (``depths=[2, 2]`` resuming a run made with ``depths=[2,2]`` was refused as another run)."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return "".join(value.split())
    return value


def _run_differences(saved: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """The settings in which ``wanted`` differs from the saved run's, as ``name saved -> wanted``."""
    keys = ("model", "dtype", "input_shape")
    flags = ("padded", "as_captured", "fused_rotary", "fused_mlp")  # absent from run.json files written before them: False
    before, after = saved.get("config") or {}, wanted.get("config") or {}
    config = [f"config {k} {before.get(k, '(default)')!r} -> {after.get(k, '(default)')!r}"
              for k in sorted(set(before) | set(after)) if _config_value(before.get(k)) != _config_value(after.get(k))]
    return ([f"{k} {saved.get(k)!r} -> {wanted.get(k)!r}" for k in keys if saved.get(k) != wanted.get(k)] + config
            + [f"{k} {bool(saved.get(k))} -> {bool(wanted.get(k))}" for k in flags
               if bool(saved.get(k)) != bool(wanted.get(k))])


def _refuse_other_run(workdir: Path, saved: dict[str, Any], opts: "RunOptions", dtype: str, device: str) -> None:
    """The check of the settings below, before the model is built: all but an input shape left to the
    model's default (known once it is built)."""
    from .models import parse_input_shape

    shape = parse_input_shape(opts.input_shape) if isinstance(opts.input_shape, str) else opts.input_shape
    wanted = {"model": opts.model, "dtype": dtype, "device": device,
              "input_shape": list(shape) if shape else saved.get("input_shape"),
              "config": {k: str(v) for k, v in opts.config.items()}, "padded": opts.padded,
              "as_captured": opts.as_captured, "fused_rotary": opts.fused_rotary, "fused_mlp": opts.fused_mlp}
    differences = _run_differences(saved, wanted)
    if differences:
        raise PipelineError(f"{workdir} already holds a run of {saved.get('model')!r} with other settings "
                            f"({'; '.join(differences)}); use another --workdir (or the same arguments to resume)")


def _saved_run(run_path: Path, plan) -> dict[str, Any]:
    """How the existing plan was made: ``run.json``, else what the plan itself records."""
    if run_path.is_file():
        try:
            return json.loads(run_path.read_text())
        except json.JSONDecodeError as exc:
            raise PipelineError(f"{run_path} is not valid JSON: {exc}") from None
    return {"model": plan.model, "dtype": plan.dtype, "input_shape": list(plan.input_shape), "config": dict(plan.config),
            "padded": plan.padded}


def run_pipeline(opts: RunOptions, *, log: Callable[[str], None] = print) -> RunResult:
    """Run every step; raises PipelineError (or another ValueError) on bad input before
    anything is written."""
    from .agents.base import AgentConfig
    from .loop.optimize import run_optimize, targets_from_plan
    from .loop.workspace import inspect_workdir
    from .models import load_model
    from .plan import load_plan, save_plan
    from .problems.base import dtype_name, parse_dtype
    from .profiler import profile_model
    from .report import write_report
    from .integrate import read_results
    from .verify import verify

    t0 = time.monotonic()
    if opts.agent is not None:
        from .agents.base import make_agent

        agent_obj = make_agent(opts.agent)  # a misconfigured agent is refused before anything is written
        if getattr(agent_obj, "preflight", None) is not None:
            agent_obj.preflight()  # so is a model endpoint that cannot be reached, or refuses the key
    device = resolve_device(opts.device)
    from .loop.executor import plan_lanes

    plan_lanes(device, opts.parallel, opts.gpus, opts.ray)  # a bad --parallel/--gpus is refused before profiling
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel file is imported
    dtype = parse_dtype(opts.dtype or ("bf16" if device.startswith("cuda") else "fp32"))
    budget_s = opts.budget_s
    if budget_s is None:
        from .loop.budget import parse_budget

        budget_s = parse_budget(DEFAULT_BUDGET_GPU if device.startswith("cuda") else DEFAULT_BUDGET_CPU)
    if budget_s <= 0:
        raise PipelineError("the budget must be positive")
    workdir = Path(opts.workdir)
    inspect_workdir(workdir, opts.use_existing_repo)  # refuse a workdir the loop would refuse, before writing

    plan_path = workdir / "plan.json"
    run_path = workdir / "run.json"
    if plan_path.is_file():  # another model or config is refused before the model is built: a default-size
        # model (hf:apertus, 7B) was built first, or refused for memory, instead of naming the run there
        _refuse_other_run(workdir, _saved_run(run_path, load_plan(plan_path)), opts, dtype_name(dtype), device)
    log(f"[1/4] model {opts.model} on {device} ({dtype_name(dtype)})")
    loaded = load_model(opts.model, dtype=dtype, device=device, input_shape=opts.input_shape,
                        config_overrides=opts.config or None, padded=opts.padded)
    log(f"      {loaded.description}")
    wanted = {"model": opts.model, "dtype": dtype_name(dtype), "device": device,
              "input_shape": list(loaded.input_shape), "config": {k: str(v) for k, v in opts.config.items()},
              "padded": opts.padded, "as_captured": opts.as_captured, "fused_rotary": opts.fused_rotary,
              "fused_mlp": opts.fused_mlp}
    reused = extending = False
    spent_before = 0.0
    saved: dict[str, Any] = {}
    if opts.extend_s is not None and not plan_path.is_file():
        raise PipelineError(f"--extend adds time to a finished run, and {workdir} holds none: "
                            "give --budget for a new run")
    if plan_path.is_file():
        plan = load_plan(plan_path)
        saved = _saved_run(run_path, plan)
        differences = _run_differences(saved, wanted)
        if differences:
            raise PipelineError(f"{workdir} already holds a run of {saved.get('model')!r} with other settings "
                                f"({'; '.join(differences)}); use another --workdir (or the same arguments to resume)")
        reused = True
        if saved.get("finished") and opts.extend_s is None:
            return _finished(workdir, plan_path, log, _ignored_when_finished(saved, opts))
        spent_before = float(saved.get("spent_s", 0.0))
        extending = bool(saved.get("extending")) and not saved.get("finished")  # an extension interrupted
        if extending and opts.extend_s is not None:  # the same command resumes it (its budget is recorded)
            budget_s = _resumed_budget(saved, opts, budget_s, log)
            log(f"resuming the extension of the run in {workdir}: {_duration(spent_before)} of its "
                f"{_duration(budget_s)} spent before")
        elif opts.extend_s is not None:
            if not saved.get("finished"):
                raise PipelineError(f"the run in {workdir} has not finished: run the same command (without --extend) "
                                    "to resume it")
            budget_s = spent_before + opts.extend_s
            extending = True
            log(f"extending the finished run in {workdir} by {_duration(opts.extend_s)}")
            if opts.budget_s is not None:
                log(f"--budget {_duration(opts.budget_s)} not used: with --extend the run's budget is its time spent "
                    f"({_duration(spent_before)}) and the time added")
        else:
            budget_s = _resumed_budget(saved, opts, budget_s, log)
            if spent_before:
                log(f"resuming the run in {workdir}: {_duration(spent_before)} of its {_duration(budget_s)} spent before")
        for change in _changed_on_resume(saved, opts):
            log(f"{change} from here on")
        log(f"[2/4] plan: reusing {plan_path} ({len(plan.supported)} problem(s))")
    else:
        log("[2/4] profiling")
        plan = profile_model(loaded, device=device, dtype=dtype, captured=opts.as_captured,
                             fuse_rotary=opts.fused_rotary, fuse_mlp=opts.fused_mlp)
        plan.config, plan.padded = {k: str(v) for k, v in opts.config.items()}, bool(opts.padded)
        workdir.mkdir(parents=True, exist_ok=True)
        save_plan(plan, plan_path)
        log(f"      plan written to {plan_path}")
        for note in unfused_flags(plan, fuse_rotary=opts.fused_rotary, fuse_mlp=opts.fused_mlp):
            log(f"      {note}")
    for p in plan.problems:
        log(f"      {p.name:<16} {p.kind or '-':<14} {100 * p.fraction:5.1f}%"
            + ("" if p.supported else f"  unsupported: {p.note}"))
    seed = opts.seed if opts.seed is not None else int(saved.get("seed", 0))
    agent = opts.agent or AgentConfig(seed=seed)
    if dataclasses.is_dataclass(agent) and getattr(agent, "seed", seed) != seed:
        agent = dataclasses.replace(agent, seed=seed)
    record = dict(wanted, budget=_duration(budget_s), agent=agent.name, seed=seed,
                  max_experiments=opts.max_experiments, spent_s=spent_before, **_earlier(saved, agent.name, seed))
    if extending:
        record["extending"] = True
    run_path.write_text(json.dumps(record, indent=2) + "\n")
    result = RunResult(plan_path=plan_path, reused_plan=reused)
    targets = targets_from_plan(plan)
    if not targets:
        result.nothing_supported = True
        log(f"nothing in {opts.model} is a kernel autokernel supports "
            f"({100 * (1 - plan.covered_fraction):.0f}% of the time is in unsupported ops); "
            f"the plan is in {plan_path}")
        return result

    remaining = budget_s - spent_before - (time.monotonic() - t0)
    if remaining <= 0:
        record["spent_s"] = spent_before + (time.monotonic() - t0)
        log(f"[3/4] optimize: no budget left ({record['spent_s']:.0f} s spent of {_duration(budget_s)}, "
            f"the profile included); skipped")
    else:
        log(f"[3/4] optimize: {len(targets)} problem(s), budget {_duration(remaining)}")
        with SpentRecorder(run_path, record, spent_before, t0):
            result.optimize = run_optimize(targets, workdir, agent=agent, budget_s=remaining,
                                           max_experiments=opts.max_experiments, device=device, seed=seed,
                                           run_name=opts.run_name, timeout_s=opts.timeout_s, show_progress=True,
                                           plan_path=plan_path, use_existing_repo=opts.use_existing_repo,
                                           parallel=opts.parallel, gpus=opts.gpus, ray=opts.ray)
        if result.optimize.stopped_reason == "interrupted":
            result.interrupted = True
            return result
    if not read_results(workdir):
        # nothing to verify: the patched model would be the original, and timing it (with the
        # breakdown's two profiles) took minutes where the profile had already spent the budget
        result.nothing_evaluated = True
        log("[4/4] verify: skipped, no kernel was evaluated (the budget ran out before the loop's first "
            "experiment): give the run more time with --extend, or a smaller --input-shape/--config")
    else:
        log("[4/4] verify and report")
        result.verify = verify(workdir, compile=opts.compile, log=lambda m: log(f"      {m}"))
        if result.verify.message:  # e.g. a kernel installed that the model never called: said, not only in verify.json
            log(f"      note: {result.verify.message}")
    record.pop("extending", None)
    run_path.write_text(json.dumps(dict(record, finished=True), indent=2) + "\n")  # before the report, which reads it
    result.report = write_report(workdir)
    return result


class SpentRecorder:
    """Writes the run's time spent (``spent_s`` in ``run.json``) every ``every_s`` seconds while
    the loop runs, and once more at the end: a run killed outright (``kill -9``, a node lost)
    resumes with what was left of its budget, not all of it again."""

    def __init__(self, run_path: Path, record: dict[str, Any], spent_before: float, t0: float,
                 every_s: float = SPENT_EVERY_S):
        self.run_path, self.record, self.spent_before, self.t0, self.every_s = run_path, record, spent_before, t0, every_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="autokernel-spent", daemon=True)

    def write(self) -> None:
        with self._lock:
            self.record["spent_s"] = self.spent_before + (time.monotonic() - self.t0)
            write_text_atomic(self.run_path, json.dumps(self.record, indent=2) + "\n")

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.write()
            except OSError:  # a full disk for a moment: the next write or the last one says it
                pass

    def __enter__(self) -> "SpentRecorder":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.write()


def _given_otherwise(saved: dict[str, Any], opts: RunOptions) -> dict[str, tuple[Any, Any]]:
    """The options given now that differ from the run's (``run.json``): flag -> (now, the run's)."""
    out: dict[str, tuple[Any, Any]] = {}
    if opts.budget_s is not None and saved.get("budget") and _duration(opts.budget_s) != saved["budget"]:
        out["--budget"] = (_duration(opts.budget_s), saved["budget"])
    if opts.agent is not None and saved.get("agent") and opts.agent.name != saved["agent"]:
        out["--agent"] = (opts.agent.name, saved["agent"])
    if opts.seed is not None and "seed" in saved and opts.seed != saved["seed"]:
        out["--seed"] = (opts.seed, saved["seed"])
    if opts.max_experiments is not None and opts.max_experiments != saved.get("max_experiments"):
        out["--max-experiments"] = (opts.max_experiments, saved.get("max_experiments"))
    return out


def _resumed_budget(saved: dict[str, Any], opts: RunOptions, default_s: float, log: Callable[[str], None]) -> float:
    """The budget of a resumed run: the one given now, else the run's own (not the default for the
    device: a run begun with --budget 2m and resumed without it had the default 10m)."""
    recorded = saved.get("budget")
    if opts.budget_s is not None:
        if "--budget" in _given_otherwise(saved, opts):
            log(f"budget {_duration(opts.budget_s)} (--budget), where the run had {recorded}")
        return opts.budget_s
    if recorded:
        from .loop.budget import BudgetError, parse_budget

        try:
            return parse_budget(recorded)
        except BudgetError:
            return default_s
    return default_s


def _changed_on_resume(saved: dict[str, Any], opts: RunOptions) -> list[str]:
    """The agent and seed given now where the run had others: they apply to the rest of it."""
    changed = _given_otherwise(saved, opts)
    return [f"{flag[2:]} {now}, where the run had {was}," for flag, (now, was) in changed.items()
            if flag in ("--agent", "--seed")]


def _earlier(saved: dict[str, Any], agent: str, seed: int) -> dict[str, list]:
    """The agents and seeds earlier sessions of a resumed or extended run used, where they differ
    from this one's (``earlier_agents``, ``earlier_seeds`` in run.json; the report names them)."""
    out = {}
    for key, now in (("agent", agent), ("seed", seed)):
        before = list(saved.get(f"earlier_{key}s", []))
        if key in saved and saved[key] != now and (not before or before[-1] != saved[key]):
            before.append(saved[key])
        if before:
            out[f"earlier_{key}s"] = before
    return out


def _ignored_when_finished(saved: dict[str, Any], opts: RunOptions) -> list[str]:
    """The options given now that a finished run does not take (it is only shown), as
    ``--flag value (the run's: value)``."""
    return [f"{flag} {now} (the run's: {was})" for flag, (now, was) in _given_otherwise(saved, opts).items()]


def _finished(workdir: Path, plan_path: Path, log: Callable[[str], None], ignored: list[str] = ()) -> RunResult:
    """A finished run run again: say so and show its report; nothing is optimized or verified."""
    from .report import collect
    from .verify import load_verify

    log(f"the run in {workdir} is finished: here is its report ({workdir / 'report.md'}); "
        f"to give it more time, run the same command with --extend 10m (or any duration)")
    if ignored:
        log(f"not used, since nothing runs: {', '.join(ignored)}; with --extend the agent and seed given apply to "
            f"the time added (--budget does not: --extend says how long)")
    return RunResult(plan_path=plan_path, reused_plan=True, finished_before=True,
                     verify=load_verify(workdir), report=collect(workdir))


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"
