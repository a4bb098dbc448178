"""How much memory the judge needs for one problem, phase by phase (pure arithmetic), and how
much it may use.

The judge and its workers share one device: on a GPU the parent's input sets, pristine
snapshots, references and output buffers, and the workers' kept outputs and history, all
live in the same memory; on the CPU the same holds for RAM.  ``SetSizes`` are the bytes of one
case (measured from a real input set and the reference's output metadata); the ``*_peak``
functions add up what is alive at once in each phase, and ``plan`` turns them and a budget into
how the judge works: exact snapshots or keyed fingerprints, outputs collected together or one
at a time, how many input sets one timing request carries, how many sets the baselines use,
or a clear refusal when even one case cannot fit.

Budget: on a GPU ``torch.cuda.mem_get_info()``'s free bytes plus what the parent's caching
allocator holds unused, times ``GPU_SAFETY`` (fragmentation, CUDA contexts, the kernel's own
temporaries beyond one output's worth); on the CPU ``CPU_FRACTION`` of ``MemAvailable`` (the
workers, the interpreter and the rest of the machine share RAM).  ``Evaluator(memory_budget=)``
sets it explicitly (tests, or a user who shares the device).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# outputs of the worker's last calls stay held (so that a ring of reused buffers shows), up to these:
# the worker keeps them, the memory plan counts them
HISTORY_CALLS = 16
HISTORY_BYTES = {"gpu": 4 << 30, "cpu": 256 << 20}

GIB = 1 << 30
MIB = 1 << 20
GPU_SAFETY = 0.85
CPU_FRACTION = 0.5
COMPARE_CHUNK_ELEMENTS = 1 << 22  # compare.py and snapshot.py work on slices of at most this many elements
# preferred size of one timing request's sets: each request costs a round trip, a tamper digest,
# and often a collect of its picked calls; 2 GiB on a GPU made softmax 4096x50257 (824 MiB a set)
# 60 requests for its 120 timed calls, 8 GiB makes it 12 (the budget bounds it on smaller devices)
TIMING_POOL_BYTES = {"gpu": 8 * GIB, "cpu": 64 * MIB}
MAX_TIMING_SETS = 64


def chunk_elements(budget: int) -> int:
    """Elements per slice of the comparison and the fingerprints: small next to the budget."""
    return int(max(1024, min(COMPARE_CHUNK_ELEMENTS, budget // (64 * 8))))


def workspace_bytes(chunk: int) -> int:
    """Temporaries of one slice: casts, masks, differences, bounds, ratios, row sums (8 bytes an
    element at most) and the fingerprint's weights and products."""
    return 14 * 8 * chunk


@dataclass(frozen=True)
class SetSizes:
    """Bytes of one case."""

    inputs: int  # the tensors of one input set, as the judge makes them
    outputs: int  # the kernel's outputs, at their declared dtypes
    reference: int  # the high-precision reference's outputs
    upcast: int = 0  # the high-precision copies of the inputs the reference runs on (0: no copy)
    workspace: int = 0  # temporaries of the chunked comparison and fingerprints (``workspace_bytes``)


@dataclass(frozen=True)
class MemoryPlan:
    budget: int
    sizes: SetSizes
    exact_snapshots: bool  # pristine inputs and first outputs kept as clones (else keyed fingerprints)
    together: bool  # the outputs of a multi-call case collected in one request (else one at a time)
    need: int  # peak of the most demanding correctness case, as planned (judge and worker)
    fits: bool
    message: str = ""
    worker: int = 0  # of ``need``, what the worker holds (its kept outputs, history, temporaries)


def history_bytes(cap: int, calls: int, outputs: int) -> int:
    """What a worker's history can hold: at most ``calls`` earlier outputs and at most ``cap``
    bytes (the worker drops the oldest past either)."""
    return min(cap, calls * outputs)


def reference_peak(s: SetSizes, snapshot: int) -> int:
    """While the reference runs: the inputs, their snapshot, the upcast copies, the reference's
    outputs and as much again for the reference's own temporaries."""
    return s.inputs + snapshot + s.upcast + 2 * s.reference


def case_peak(s: SetSizes, calls: int, history: int, exact: bool, together: bool) -> int:
    """A correctness case of ``calls`` calls on one input set.

    Parent: inputs, their pristine snapshot, the reference, the collected output buffers (all
    calls' when ``together``, else one plus the first output kept for the determinism check)
    and the compare workspace; plus the worker's share (``worker_peak``: its copy of the set
    for every call among it)."""
    snapshot = s.inputs if exact else 0
    if together:
        buffers = calls * s.outputs
    else:
        buffers = s.outputs + (s.outputs if exact and calls > 1 else 0)
    parent = s.inputs + snapshot + s.reference + buffers + s.workspace
    return max(parent, reference_peak(s, snapshot)) + worker_peak(s, calls, history)


def worker_peak(s: SetSizes, calls: int, history: int) -> int:
    """A worker's share: every call's inputs and outputs kept until the next request (the
    worker copies the parent's set into memory of its own before each call, as it draws timed
    sets: worker_main ``_State._copied``), its history, and one output's worth of the
    kernel's own temporaries."""
    return calls * (s.inputs + s.outputs) + history + s.outputs


def smoke_peak(s: SetSizes, history: int, exact: bool, together: bool) -> int:
    """The smoke stage: its second call also holds the first call's reference; before it, a
    fresh draw is copied into the first call's inputs (both sets alive for a moment)."""
    drawing = 2 * s.inputs + s.reference + worker_peak(s, 1, history)
    return max(case_peak(s, 1, history, exact, together) + s.reference, drawing)


def batch_peak(s: SetSizes, n: int, history: int, exact: bool) -> int:
    """``n`` one-call cases of one shape in one request: each with its inputs, snapshot,
    reference and collected outputs in the judge and its kept copy of the inputs and kept
    outputs in the worker."""
    per_case = 2 * s.inputs + (s.inputs if exact else 0) + s.reference + 2 * s.outputs
    return n * per_case + s.upcast + s.reference + s.workspace + history + s.outputs


def timing_fixed(s: SetSizes, history: int, incumbent: bool) -> int:
    """What a timing request holds besides its input sets: one checked call's reference and
    collected outputs, the compare workspace, the workers' histories and temporaries."""
    workers = (2 if incumbent else 1) * (history + s.outputs)
    return s.upcast + 2 * s.reference + s.outputs + s.workspace + workers


def timing_set_bytes(s: SetSizes, incumbent: bool, sent: bool = False) -> int:
    """One timing set: the inputs and outputs each worker timed keeps for it until its next
    request (the incumbent's worker keeps its own while the candidate's request runs, and the
    other way round), and with ``sent`` (sets this process draws and sends: a problem the
    worker cannot load by name) this process's own set too, which the worker copies."""
    return (2 if incumbent else 1) * (s.inputs + s.outputs) + (s.inputs if sent else 0)


def timing_peak(s: SetSizes, sets: int, history: int, incumbent: bool, sent: bool = False) -> int:
    """What a timing request of ``sets`` input sets holds at once (judge and workers)."""
    return timing_fixed(s, history, incumbent) + sets * timing_set_bytes(s, incumbent, sent)


def timing_sets(s: SetSizes, budget: int, history: int, incumbent: bool, gpu: bool, sent: bool = False) -> int:
    """Input sets one timing request may carry (each used once): as many as the preferred pool
    holds, no more than the budget allows once a set's inputs and the kept outputs are counted
    (``timing_set_bytes``); 0 when not even one fits."""
    per_set = timing_set_bytes(s, incumbent, sent)
    room = budget - timing_fixed(s, history, incumbent)
    fit = room // max(1, per_set) if room > 0 else 0
    preferred = TIMING_POOL_BYTES["gpu" if gpu else "cpu"] // max(1, s.inputs + s.outputs)
    return int(min(MAX_TIMING_SETS, fit, max(1, preferred)))


def baseline_sets(s: SetSizes, budget: int, held: int, wanted: int) -> int:
    """Input sets for the eager / torch.compile baselines while the workers still hold ``held``
    bytes: each set, plus a few outputs in flight and the compile's workspace; 0 when none fits."""
    room = budget - held - 4 * s.outputs - 2 * s.reference
    return int(max(0, min(wanted, room // max(1, s.inputs)))) if room > 0 else 0


def plan(s: SetSizes, budget: int, history_cap: int, history_calls: int, max_calls: int = 2,
         waiting_sets: int = 0, heldout: SetSizes | None = None) -> MemoryPlan:
    """The cheapest way of working that fits, from exact snapshots with outputs collected
    together (fastest, most detailed messages) down to fingerprints with outputs collected one
    at a time; ``fits`` False with what is needed against what is available when none does.
    ``s``: the largest case at the target shapes (every stage runs there); ``heldout``: the
    largest held-out case (called twice, and its adversarial draws).  ``waiting_sets``: input
    sets drawn together that wait while one is judged (a problem's adversarial draws come as one
    list)."""
    history = history_bytes(history_cap, history_calls, max(s.outputs, heldout.outputs if heldout else 0))
    need = 0
    for exact, together in ((True, True), (True, False), (False, False)):
        need = max(case_peak(s, max_calls, history, exact, together),
                   smoke_peak(s, history, exact, together),
                   case_peak(s, 1, history, exact, together) + waiting_sets * s.inputs,  # numerics
                   case_peak(heldout, 2, history, exact, together) if heldout else 0,
                   case_peak(heldout, 1, history, exact, together) + waiting_sets * heldout.inputs if heldout else 0)
        if need <= budget:
            return MemoryPlan(budget, s, exact, together, need, True, worker=worker_peak(s, max_calls, history))
    big = heldout if heldout is not None and heldout.inputs > s.inputs else s
    return MemoryPlan(budget, s, False, False, need, False, shortfall_message(need, budget, big),
                      worker_peak(s, max_calls, history))


def describe_plan(p: MemoryPlan | None) -> str:
    """A note for the record when the judge worked in a memory-saving way (else empty)."""
    if p is None or not p.fits or (p.exact_snapshots and p.together):
        return ""
    how = "outputs collected one at a time" + ("" if p.exact_snapshots else ", fingerprints instead of clones")
    return f"; memory: {how} (about {fmt_bytes(p.need)} of {fmt_bytes(p.budget)})"


def shortfall_message(need: int, budget: int, s: SetSizes) -> str:
    return (f"not enough memory to judge this problem: one case needs about {fmt_bytes(need)} (inputs "
            f"{fmt_bytes(s.inputs)}, outputs {fmt_bytes(s.outputs)}, reference {fmt_bytes(s.reference)}; the judge, "
            f"the worker and its kept outputs together) and {fmt_bytes(budget)} is available")


def fmt_bytes(n: float) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{math.ceil(n / 1024)} KiB"


def device_budget(device: str) -> int:
    """Bytes the judge may plan with on ``device`` right now (see the module docstring)."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int((free + idle_cached_bytes(device)) * GPU_SAFETY)
    return int(available_ram() * CPU_FRACTION)


def idle_cached_bytes(device: str) -> int:
    """Bytes this process's CUDA caching allocator holds reserved but not allocated on
    ``device``.  Read from the allocator's nested statistics in one call:
    ``torch.cuda.memory_reserved`` and ``memory_allocated`` each flatten the whole statistics
    tree (about 0.55 ms a call on the H200, asked before every input set of an evaluation)."""
    import torch

    stats = torch.cuda.memory_stats_as_nested_dict(torch.device(device))
    if not stats:  # CUDA not initialised in this process: nothing cached
        return 0
    return max(0, int(stats["reserved_bytes"]["all"]["current"]) - int(stats["allocated_bytes"]["all"]["current"]))


def available_ram() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 8 * GIB
