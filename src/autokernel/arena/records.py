"""The arena's per-problem record."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class ProblemResult:
    """What the arena found for one problem file.

    ``status``: ``judged`` (``verdict`` is the judge's, or ``error`` when the judge itself
    failed, counted as not correct); ``skipped`` (the problem cannot run here: its sizes cannot
    be scaled safely, its reference is random or needs a missing package: left out of fast_p);
    ``no-solution`` (counted as failed).
    ``heldout``: ``pass``/``fail`` at unseen sizes, ``n/a`` when the file has no size
    constants or no unseen sizes run, None when not tried (not correct at the file's sizes).
    Speedups are against PyTorch eager and torch.compile, measured on a GPU only.
    """

    problem: str
    problem_file: str
    solution_file: str | None
    status: str
    verdict: str = ""
    failed_stage: str | None = None
    message: str = ""
    sizes: str = ""
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    timing_note: str = ""
    heldout: str | None = None
    heldout_sizes: str = ""
    heldout_message: str = ""
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.status == "judged" and self.verdict == "pass"

    @property
    def correct_heldout(self) -> bool:
        """Correct at the file's sizes and at unseen ones (``n/a`` counts as the file's)."""
        return self.correct and self.heldout in ("pass", "n/a")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ProblemResult":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
