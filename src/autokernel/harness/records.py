"""The Evaluation record and its parts.  Plain dataclasses that round-trip through JSON.

``Evaluation.verdict`` is one of:

* ``pass``      — every correctness stage passed and no integrity rule was broken;
* ``incorrect`` — a correctness stage failed (``failed_stage`` names it), or the file does
  not import / lacks ``kernel_fn``;
* ``timeout``   — the kernel did not finish within the evaluation's timeout;
* ``crash``     — the worker process died (segfault, CUDA fault, abort);
* ``rejected``  — an integrity rule was broken (``integrity`` lists the findings);
* ``slower``    — only with an incumbent, for an Evaluator made with ``stop_at_loss`` (the
  loop's): smoke passed and the candidate, timed against the incumbent right after it, was not
  faster beyond the noise, so it could not be kept whatever the other stages would find; they
  were not run, and ``correct`` is False (not established).

Timings are present only when ``correct`` or ``slower``; ``timing_kind`` says whether they were
measured on a GPU (``"gpu"``) or are wall-clock times of the Triton interpreter
(``"interpreter"``), which say nothing about GPU performance.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

VERDICTS = ("pass", "incorrect", "timeout", "crash", "rejected", "slower")
STAGES = ("smoke", "sweep", "numerics", "determinism", "edges", "heldout")


@dataclass
class StageResult:
    name: str
    passed: bool
    message: str = ""
    # worst observed error over the stage, as a fraction of the allowed error (<= 1 passes)
    worst_error: float | None = None
    worst_case: str | None = None  # e.g. "shape=128x256 dtype=bf16 case=large"
    seconds: float = 0.0


@dataclass
class Finding:
    """An integrity rule the kernel broke."""

    rule: str  # one of harness.integrity.RULES
    message: str


@dataclass
class ShapeTiming:
    shape: dict[str, int]
    dtype: str
    latency_us: float  # median
    spread_us: float  # (p80 - p20) / 2 of the samples: the measured noise
    weight: float = 1.0  # how much this shape counts in the score (calls in the model)
    gbps: float | None = None
    tflops: float | None = None
    floor_us: float | None = None  # max(bytes / bandwidth, flops / peak) with measured ceilings
    pct_roofline: float | None = None  # 100 * floor_us / latency_us
    eager_us: float | None = None
    compile_us: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None


@dataclass
class Comparison:
    """Candidate and incumbent timed interleaved, each in its own worker process."""

    candidate_us: float  # time-weighted score
    incumbent_us: float
    noise_frac: float  # relative spread measured on the two
    significant: bool  # candidate faster by more than the noise (and the judge's own clock agrees)
    median_ratio: float | None = None  # median per-round candidate/incumbent: what keep/revert decides on
    wall_confirmed: bool | None = None  # the parent's wall clock saw at least half the claimed gain

    @property
    def speedup(self) -> float:
        return self.incumbent_us / self.candidate_us if self.candidate_us > 0 else float("inf")

    @property
    def decision_speedup(self) -> float:
        """The speedup the keep/revert decision used (1 / median per-round ratio)."""
        if self.median_ratio:
            return 1.0 / self.median_ratio
        return self.speedup


@dataclass
class Evaluation:
    problem: str
    kernel_file: str
    correct: bool
    verdict: str
    message: str = ""
    failed_stage: str | None = None
    stages: list[StageResult] = field(default_factory=list)
    integrity: list[Finding] = field(default_factory=list)
    device: str = "cpu"
    device_name: str = ""
    timing_kind: str | None = None  # "gpu" | "interpreter" | None
    timings: list[ShapeTiming] = field(default_factory=list)
    score_us: float | None = None  # sum(weight * latency) over timed shapes
    eager_score_us: float | None = None
    compile_score_us: float | None = None
    vs_incumbent: Comparison | None = None
    wall_s: float = 0.0
    # where wall_s went: "load" (worker + import), "stages", "timing" (judged timed calls), "baselines"
    phases: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------ derived
    @property
    def speedup_vs_eager(self) -> float | None:
        if self.score_us and self.eager_score_us:
            return self.eager_score_us / self.score_us
        return None

    @property
    def speedup_vs_compile(self) -> float | None:
        if self.score_us and self.compile_score_us:
            return self.compile_score_us / self.score_us
        return None

    @property
    def pct_roofline(self) -> float | None:
        """Time-weighted fraction of the roofline: sum(w*floor) / sum(w*latency)."""
        pairs = [(t.weight * t.floor_us, t.weight * t.latency_us) for t in self.timings if t.floor_us]
        if not pairs or len(pairs) != len(self.timings):
            return None
        return 100.0 * sum(p[0] for p in pairs) / sum(p[1] for p in pairs)

    # ------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["speedup_vs_eager"] = self.speedup_vs_eager
        d["speedup_vs_compile"] = self.speedup_vs_compile
        d["pct_roofline"] = self.pct_roofline
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evaluation":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["stages"] = [StageResult(**s) for s in d.get("stages", [])]
        kw["integrity"] = [Finding(**f) for f in d.get("integrity", [])]
        kw["timings"] = [ShapeTiming(**t) for t in d.get("timings", [])]
        if d.get("vs_incumbent"):
            kw["vs_incumbent"] = Comparison(**d["vs_incumbent"])
        return cls(**kw)

    @classmethod
    def from_json(cls, text: str) -> "Evaluation":
        return cls.from_dict(json.loads(text))
