"""The garbage collector runs no code of the kernel's in the judge's own work (CPU, Triton
interpreter).  tests/attacks/reduce_gc_finalizer.py passed all six stages before: its row sums
ran in a generator's ``finally`` that the first collection after each call ran, in the judge's
checks after the call returned (untimed)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import judge_attack, no_static_checks, rules  # noqa: E402,F401  (a fixture among them)

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")


@pytest.mark.parametrize("edit,message", [
    ("", "when the judge collected garbage"),  # the collector is off: the finalizer runs at the watched collection
    ("ENABLE_COLLECTOR = True", "switched the garbage collector back on"),
    ("REBIND = True", "torch.ones_like"),
])
def test_a_finalizer_timed_to_run_in_the_judges_checks_is_caught(no_static_checks, tmp_path, edit, message):
    result = judge_attack(tmp_path, "reduce_gc_finalizer.py", (edit.replace("True", "False"), edit) if edit else None,
                          timing=False)
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert message in result.message and result.failed_stage == "smoke", result.message


# the reduce starter, called through a wrapper that leaves a cycle holding a temporary on each call
CYCLE_WRAPPER = """

_starter_kernel_fn = kernel_fn


def kernel_fn(x):
    scratch = {"buffer": torch.empty_like(x)}  # honest, if untidy: a cycle that holds a temporary
    scratch["self"] = scratch
    return _starter_kernel_fn(x)
"""


def test_cyclic_garbage_of_each_call_is_freed_before_the_next(tmp_path):
    """With the collector off, a cycle a call leaves (here holding an input-sized temporary)
    would wait for the request's end: over a timing request's 120 calls on a GPU, 120 of them.
    The worker collects after every call."""
    import subprocess
    import textwrap

    from autokernel.problems.registry import KERNELS_DIR

    kernel = tmp_path / "kernel.py"
    kernel.write_text((KERNELS_DIR / "reduce.py").read_text() + CYCLE_WRAPPER)
    script = textwrap.dedent(f"""
        import gc, os
        os.environ["TRITON_INTERPRET"] = "1"
        import torch
        from autokernel.harness import integrity, worker_main
        state = worker_main._State("cpu")
        worker_main._import_problem_modules()
        state.fingerprint = integrity.FingerprintWatch()
        assert state.handle("load", {{"op": "load", "slot": "candidate", "path": {str(kernel)!r},
                                      "problem": "reduce"}}) == {{"ok": True}}
        reply = state.call({{"op": "call", "slot": "candidate", "shape": {{"M": 4, "N": 8}}, "dtype": torch.float32,
                            "sets": None, "draw": [1, 2, 3, 4, 5], "expected": None, "poison": None}})
        assert not reply.get("error") and not reply["findings"], reply
        print("left", gc.collect(1))
    """)
    src = Path(__file__).resolve().parent.parent / "src"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(src)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "left 0", done.stdout
