"""The garbage collector runs no code of the kernel's in the judge's own work (CPU, Triton
interpreter).  tests/attacks/reduce_gc_finalizer.py passed all six stages before: its row sums
ran in a generator's ``finally`` that the first collection after each call ran, in the judge's
checks after the call returned (untimed)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autokernel.harness import Evaluator

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS, no_static_checks, rules  # noqa: E402,F401  (a fixture among them)

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")


@pytest.mark.parametrize("switch_on,message", [
    (False, "when the judge collected garbage"),  # the collector is off: the finalizer runs at the watched collection
    (True, "switched the garbage collector back on"),
])
def test_a_finalizer_timed_to_run_in_the_judges_checks_is_caught(no_static_checks, tmp_path, switch_on, message):
    source = (ATTACKS / "reduce_gc_finalizer.py").read_text()
    path = tmp_path / "kernel.py"
    path.write_text(source.replace("ENABLE_COLLECTOR = False", f"ENABLE_COLLECTOR = {switch_on}"))
    with Evaluator("reduce", device="cpu", shapes=["8x64"], dtypes=["fp32"], timeout_s=60, timing=False) as ev:
        result = ev.evaluate(path)
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert message in result.message and result.failed_stage == "smoke", result.message
