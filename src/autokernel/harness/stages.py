"""The correctness stages and the per-call checks (DESIGN §5), run from the parent process.

Stages, in order, stopping at the first failure:

``smoke``        the smallest target shape at the first dtype; then the *cached-output* check:
                 new values are written into the very same input tensors and the kernel is
                 called again — its output must follow the new reference and must not reuse
                 the storage of the first output;
``sweep``        every target shape x every dtype (the smoke case excepted);
``numerics``     ``problem.adversarial_inputs`` at every target shape x every dtype (passes with
                 a note when the problem has none): a kernel picks its code path by size, so
                 overflow-prone values must reach every path that is timed;
``determinism``  every target shape x every dtype, called twice on the same inputs: identical
                 bits (the edge and held-out shapes are called twice in their stages too);
``edges``        ``problem.edge_shapes_for(device)`` x every dtype, on every device;
``heldout``      one fresh shape near each target shape (``problem.heldout_shape``) at the first
                 dtype, from a random generator seeded per evaluation (the seed is in the
                 message); then, for row-wise problems, a shape with many rows and one past
                 2**31 elements, compared on sampled rows (large_shapes.py; on a GPU).

Inputs come from ``problem.make_inputs`` with seeds drawn fresh for every evaluation (and with
them the non-tensor arguments a problem varies: eps, scale...).  For every
call (``Judge.run_case``) the parent, never the worker: keeps pristine clones of the inputs and
checks their bits afterwards (``modified-input``); computes the reference on upcast copies
(float64 on CPU, float32 with TF32 off on GPU) and the eager reference's output shapes and
dtypes; checks the ops the worker recorded (``torch-op``) and the worker's tamper report
(``monkey-patch``); compares (compare.py).  An output with NaN/inf where the reference is finite
is probed again with a second poison value: elements that follow the poison were never written
(``partial-write``).
"""
from __future__ import annotations

import contextlib
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..problems.base import Problem, Shape, dtype_name, format_shape
from . import compare, integrity
from .records import Finding, StageResult

NAN_POISON = float("nan")
PROBE_POISON = 1234.5  # second poison for the partial-write probe


class Rejection(Exception):
    """An integrity rule was broken."""

    def __init__(self, rule: str, message: str):
        assert rule in integrity.RULES, rule
        self.finding = Finding(rule=rule, message=message)
        super().__init__(f"{rule}: {message}")


class CaseFailure(Exception):
    """A correctness check failed (the stage fails, the verdict is ``incorrect``)."""

    def __init__(self, message: str, label: str, worst: float | None = None):
        self.label = label
        self.worst = worst
        super().__init__(message)


class CudaFault(Exception):
    """The kernel faulted on the device; the worker's CUDA context is gone."""


@dataclass
class Case:
    shape: Shape
    dtype: torch.dtype
    args: tuple
    name: str = ""

    @property
    def label(self) -> str:
        text = f"shape={format_shape(self.shape)} dtype={dtype_name(self.dtype)}"
        return f"{text} case={self.name}" if self.name else text


@dataclass
class CaseResult:
    outs: list[tuple]  # one tuple of outputs per call
    verdict: compare.Verdict
    same_storage: bool
    refs: Any = None


@dataclass
class StageTally:
    name: str
    started: float = field(default_factory=time.perf_counter)
    worst: float | None = None
    worst_case: str | None = None

    def add(self, verdict: compare.Verdict, label: str) -> None:
        if self.worst is None or verdict.worst_error > self.worst:
            self.worst, self.worst_case = verdict.worst_error, label

    def result(self, passed: bool, message: str) -> StageResult:
        worst = None if self.worst is None or not math.isfinite(self.worst) else self.worst
        return StageResult(self.name, passed, message, worst, self.worst_case, round(time.perf_counter() - self.started, 4))


def tensors_of(args: Any) -> list[torch.Tensor]:
    if isinstance(args, torch.Tensor):
        return [args]
    if isinstance(args, (list, tuple)):
        return [t for a in args for t in tensors_of(a)]
    return []


def upcast(args: Any, dtype: torch.dtype) -> Any:
    if isinstance(args, torch.Tensor):
        return args.detach().to(dtype) if args.is_floating_point() else args.detach().clone()
    if isinstance(args, tuple):
        return tuple(upcast(a, dtype) for a in args)
    if isinstance(args, list):
        return [upcast(a, dtype) for a in args]
    return args


@contextlib.contextmanager
def exact_fp32():
    """TF32 off while the reference runs on a GPU."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])


class Judge:
    """Runs cases in the worker and judges them in this (the parent) process."""

    def __init__(self, problem: Problem, device: str, worker: Any, timeout_s: float, seed: int):
        self.problem = problem
        self.device = device
        self.worker = worker
        self.timeout_s = timeout_s
        self.gpu = device.startswith("cuda")
        self.hp_dtype = torch.float32 if self.gpu else torch.float64
        self._seeds = iter(range(seed, seed + 10_000_000))
        self._meta: dict[tuple, compare.OutputMeta] = {}

    # ------------------------------------------------------------ inputs and references
    def next_seed(self) -> int:
        return next(self._seeds)

    def make_case(self, shape: Shape, dtype: torch.dtype) -> Case:
        return Case(dict(shape), dtype, tuple(self.problem.make_inputs(dict(shape), dtype, self.device, self.next_seed())))

    def reference(self, args: tuple) -> Any:
        with torch.no_grad(), (exact_fp32() if self.gpu else contextlib.nullcontext()):
            return self.problem.reference(*upcast(args, self.hp_dtype))

    def meta(self, case: Case) -> compare.OutputMeta:
        key = (tuple(case.shape.items()), case.dtype)
        if key not in self._meta:
            with torch.no_grad():
                self._meta[key] = compare.output_meta(self.problem.reference(*upcast(case.args, case.dtype)))
        return self._meta[key]

    def sync(self) -> None:
        if self.gpu:
            torch.cuda.synchronize()

    # ------------------------------------------------------------ worker requests
    def request(self, message: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        self.sync()
        reply = self.worker.request(message, self.timeout_s if timeout_s is None else timeout_s)
        if reply.get("tampered"):
            raise Rejection("monkey-patch", "the kernel replaced " + ", ".join(map(str, reply["tampered"])))
        if reply.get("cuda_fault"):
            raise CudaFault(reply.get("error", "CUDA fault"))
        if reply.get("internal"):
            raise RuntimeError(reply.get("error", "harness worker error") + "\n" + reply.get("trace", ""))
        return reply

    def check_inputs(self, args: tuple, pristine: list[torch.Tensor], label: str) -> None:
        self.sync()
        for i, (now, before) in enumerate(zip(tensors_of(args), pristine)):
            if not compare.bitwise_equal(now, before):
                n = compare.count_differing(now, before)
                raise Rejection("modified-input", f"the kernel wrote into input tensor {i} ({n} elements changed; {label})")

    def check_ops(self, ops: list[str], label: str) -> None:
        bad = integrity.disallowed_ops(ops, self.problem.allowed_ops, self.problem.forbidden_ops)
        if bad:
            raise Rejection("torch-op", f"the kernel called PyTorch op(s) {', '.join(bad)} ({label}); "
                            "a kernel must compute its result itself (allowed: allocation, views, copies)")

    def run_case(self, case: Case, calls: int = 1, refs: Any = None) -> CaseResult:
        """Call the kernel on ``case.args`` and judge the outputs of every call."""
        pristine = [t.clone() for t in tensors_of(case.args)]
        if refs is None:
            refs = self.reference(case.args)
        meta = self.meta(case)
        reply = self._run(case, calls, NAN_POISON)
        self.check_inputs(case.args, pristine, case.label)
        if "error" in reply:
            raise CaseFailure(f"the kernel raised {reply['error']}", case.label)
        self.check_ops(reply["ops"], case.label)
        self.check_call(reply, case.label)
        outs = reply["outs"]
        tol = self.problem.tolerance(case.dtype)
        verdicts = [compare.compare_outputs(o, refs, meta, tol) for o in outs]
        failing = [v for v in verdicts if not v.ok]
        verdict = failing[0] if failing else max(verdicts, key=lambda v: v.worst_error)
        if failing and verdict.nonfinite:
            self._probe_partial_write(case, outs[verdicts.index(verdict)], pristine)
        return CaseResult(outs, verdict, bool(reply.get("same_storage")), refs)

    def call_message(self, shape: Shape, dtype: torch.dtype, sets: list, meta: compare.OutputMeta,
                     poison: float | None = NAN_POISON, slot: str = "candidate") -> dict[str, Any]:
        """The one request every kernel call goes through, judged or timed alike."""
        return {"op": "call", "slot": slot, "shape": shape, "dtype": dtype, "sets": sets, "poison": poison,
                "expected": [(list(sh), str(dt)) for sh, dt in zip(meta.shapes, meta.dtypes)],
                "require_launch": self.problem.forbidden_ops is None}

    def check_call(self, reply: dict[str, Any], label: str) -> None:
        """The worker's per-call findings (aliasing, threads, launches, the watch) and the
        outputs that were not plain tensors of the declared dtype and shape."""
        for finding in reply.get("findings") or []:
            rule = str(finding.get("rule"))
            rule = rule if rule in integrity.RULES else "monkey-patch"
            raise Rejection(rule, f"{finding.get('message')} ({label}, call {finding.get('call', 0)})")
        for bad in reply.get("bad") or []:
            if bad is not None:
                raise CaseFailure(f"not a plain tensor of the declared dtype and shape: {bad}", label)

    def collect(self, indices: list[int], meta: compare.OutputMeta, label: str, slot: str = "candidate") -> list[tuple]:
        """The outputs of the named calls of the last ``call`` request, copied by the worker
        into buffers this process allocated (nothing the candidate made crosses over)."""
        buffers = []
        for _ in indices:
            outs = []
            for shape, dtype in zip(meta.shapes, meta.dtypes):
                buf = torch.empty(shape, dtype=dtype, device=self.device)
                buf.fill_(float("nan") if buf.is_floating_point() else -7)
                outs.append(buf)
            buffers.append(outs)
        self.sync()
        reply = self.request({"op": "collect", "slot": slot, "indices": list(indices), "buffers": buffers})
        if "error" in reply:
            raise CaseFailure(f"the kernel's outputs could not be collected: {reply['error']}", label)
        self.check_call(reply, label)
        return [tuple(outs) for outs in buffers]

    def _run(self, case: Case, calls: int, poison: float | None) -> dict[str, Any]:
        meta = self.meta(case)
        reply = self.request(self.call_message(case.shape, case.dtype, [case.args] * calls, meta, poison))
        if "error" in reply or any(b is not None for b in reply.get("bad") or []) or reply.get("findings"):
            reply["outs"] = []
            return reply
        reply["outs"] = self.collect(list(range(calls)), meta, case.label)
        return reply

    def _probe_partial_write(self, case: Case, first: tuple, pristine: list[torch.Tensor]) -> None:
        reply = self._run(case, 1, PROBE_POISON)
        self.check_inputs(case.args, pristine, case.label)
        if "error" in reply or not reply["outs"]:
            return
        for i, (a, b) in enumerate(zip(first, reply["outs"][0])):
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
                continue
            if not a.is_floating_point() or not b.is_floating_point():
                continue
            unwritten = int((torch.isnan(a) & ~torch.isnan(b)).sum())
            if unwritten:
                raise Rejection("partial-write", f"{unwritten} of {a.numel()} elements of output {i} were never "
                                f"written ({case.label}): they hold whatever the allocation held")

    def fail_if_wrong(self, result: CaseResult, case: Case) -> None:
        if not result.verdict.ok:
            raise CaseFailure(result.verdict.message, case.label, result.verdict.worst_error)


# ====================================================================== stages
StageFn = Callable[["Judge", "StagePlan", StageTally], str]


@dataclass
class StagePlan:
    shapes: list[Shape]  # target shapes
    dtypes: list[torch.dtype]
    heldout_seed: int


def smallest(shapes: list[Shape]) -> Shape:
    return min(shapes, key=lambda s: math.prod(max(v, 1) for v in s.values()))


def largest(shapes: list[Shape]) -> Shape:
    return max(shapes, key=lambda s: math.prod(max(v, 1) for v in s.values()))


def _checked(judge: Judge, tally: StageTally, case: Case, calls: int = 1) -> CaseResult:
    result = judge.run_case(case, calls)
    tally.add(result.verdict, case.label)
    judge.fail_if_wrong(result, case)
    return result


def with_scalars_of(args: Any, fresh: Any) -> Any:
    """``args`` with its tensors kept (the very same objects) and every other value taken from
    ``fresh``, a draw of the same structure: after the fresh tensors are written into the old
    ones, the non-tensor arguments (eps, ignore_index...) must be the ones they were drawn for."""
    if isinstance(args, torch.Tensor):
        return args
    if isinstance(args, (tuple, list)) and isinstance(fresh, (tuple, list)) and len(args) == len(fresh):
        return type(args)(with_scalars_of(a, f) for a, f in zip(args, fresh))
    return fresh


def stage_smoke(judge: Judge, plan: StagePlan, tally: StageTally) -> str:
    case = judge.make_case(smallest(plan.shapes), plan.dtypes[0])
    first = _checked(judge, tally, case)
    if first.same_storage:
        raise Rejection("cached-output", f"the output shares storage with an earlier output ({case.label})")
    # Cached-output check: same tensors, new values, written in place by the parent.
    refs_before = first.refs
    fresh = judge.make_case(case.shape, case.dtype)
    with torch.no_grad():
        for dst, src in zip(tensors_of(case.args), tensors_of(fresh.args)):
            dst.copy_(src)
    judge.sync()
    case = Case(case.shape, case.dtype, with_scalars_of(case.args, fresh.args), case.name)
    second = judge.run_case(case)
    if second.same_storage:
        raise Rejection("cached-output", f"called again after its inputs changed, the kernel returned the storage "
                        f"of its previous output ({case.label})")
    if not second.verdict.ok:
        stale = compare.compare_outputs(second.outs[0], refs_before, judge.meta(case), judge.problem.tolerance(case.dtype))
        if stale.ok:
            raise Rejection("cached-output", f"after new values were written into the same input tensors the kernel "
                            f"still returned the old result ({case.label})")
    tally.add(second.verdict, case.label + " (inputs rewritten in place)")
    judge.fail_if_wrong(second, case)
    return f"{case.label}; output followed inputs rewritten in place"


def stage_sweep(judge: Judge, plan: StagePlan, tally: StageTally) -> str:
    skip = (tuple(smallest(plan.shapes).items()), plan.dtypes[0])
    n = 0
    for dtype in plan.dtypes:
        for shape in plan.shapes:
            if (tuple(shape.items()), dtype) == skip:
                continue
            _checked(judge, tally, judge.make_case(shape, dtype))
            n += 1
    return f"{n} case(s): {len(plan.shapes)} shape(s) x {len(plan.dtypes)} dtype(s)"


def _checked_twice(judge: Judge, tally: StageTally, case: Case) -> CaseResult:
    """Two calls on the same inputs: both judged, and their bits identical."""
    result = _checked(judge, tally, case, calls=2)
    first, second = result.outs
    for i, (a, b) in enumerate(zip(first, second)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and not compare.bitwise_equal(a, b):
            n = compare.count_differing(a, b)
            raise CaseFailure(f"nondeterministic: two calls on the same inputs differ in {n} element(s) of output {i}",
                              case.label)
    if result.same_storage:
        raise Rejection("cached-output", f"two calls returned the same output storage ({case.label})")
    return result


def stage_numerics(judge: Judge, plan: StagePlan, tally: StageTally) -> str:
    make = judge.problem.adversarial_inputs
    if make is None:
        return "skipped: the problem defines no adversarial inputs"
    n = 0
    for dtype in plan.dtypes:
        for shape in plan.shapes:
            for name, args in make(dict(shape), dtype, judge.device, judge.next_seed()):
                _checked(judge, tally, Case(dict(shape), dtype, tuple(args), name))
                n += 1
    return f"{n} adversarial case(s) at {len(plan.shapes)} shape(s) x {len(plan.dtypes)} dtype(s)"


def stage_determinism(judge: Judge, plan: StagePlan, tally: StageTally) -> str:
    for dtype in plan.dtypes:
        for shape in plan.shapes:
            _checked_twice(judge, tally, judge.make_case(shape, dtype))
    return f"{len(plan.shapes)} shape(s) x {len(plan.dtypes)} dtype(s): identical bits over 2 calls"


def stage_edges(judge: Judge, plan: StagePlan, tally: StageTally) -> str:
    shapes = list(judge.problem.edge_shapes_for(judge.device))
    if not shapes:
        return "skipped: the problem defines no edge shapes"
    for dtype in plan.dtypes:
        for shape in shapes:
            _checked_twice(judge, tally, judge.make_case(shape, dtype))
    return (f"{len(shapes)} edge shape(s) x {len(plan.dtypes)} dtype(s), 2 identical calls each: "
            + ", ".join(format_shape(s) for s in shapes))


def stage_heldout(judge: Judge, plan: StagePlan, tally: StageTally) -> str:
    rng = random.Random(plan.heldout_seed)
    shapes = [judge.problem.heldout_shape(dict(s), rng) for s in plan.shapes]
    for shape in shapes:
        _checked_twice(judge, tally, judge.make_case(shape, plan.dtypes[0]))
    from . import large_shapes

    large = large_shapes.run(judge, plan, tally, rng)
    return f"seed={plan.heldout_seed}: " + ", ".join([format_shape(s) for s in shapes] + large)


STAGE_FUNCTIONS: tuple[tuple[str, StageFn], ...] = (
    ("smoke", stage_smoke),
    ("sweep", stage_sweep),
    ("numerics", stage_numerics),
    ("determinism", stage_determinism),
    ("edges", stage_edges),
    ("heldout", stage_heldout),
)
