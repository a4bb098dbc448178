"""Every starter kernel of every registered kind passes every stage of the harness on CPU
(Triton interpreter), integrity checks and the after-timing re-check included."""
from __future__ import annotations

import importlib.util
import os

import pytest

from autokernel.harness import Evaluator
from autokernel.harness.records import STAGES
from autokernel.problems.registry import BUILTIN_KINDS, KERNELS_DIR, list_kinds

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")


@pytest.mark.parametrize("kind", list_kinds())
def test_starter_passes_every_stage(kind):
    if importlib.util.find_spec(f"autokernel.problems.{BUILTIN_KINDS[kind]}") is None:
        pytest.skip(f"problem module autokernel.problems.{kind} does not exist yet")
    starter = KERNELS_DIR / f"{kind}.py"
    if not starter.exists():
        pytest.skip(f"starter kernel {starter.name} does not exist yet")
    # baselines off: eager timings of the interpreter run say nothing; timing stays on for its re-check
    with Evaluator(kind, device="cpu", baselines=False) as ev:
        result = ev.evaluate(starter)
    assert result.verdict == "pass", f"{kind}: {result.failed_stage}: {result.message}"
    assert [s.name for s in result.stages] == list(STAGES)
    assert result.timing_kind == "interpreter" and len(result.timings) == len(ev.shapes)
    assert result.integrity == []
