"""Twenty-ninth red-team pass on the judge (CPU, Triton interpreter): what pass 28 left open.

* **A memo that stays off for its first calls.**  The smoke stage writes new values into the
  previous call's input memory (the same addresses, the scalars kept or redrawn) at its start
  only; no later call of the judge came with the same addresses and scalars on purpose.  So
  ``tests/attacks/xielu_memo_after_six_calls.py`` (the starter behind a memo keyed on the input's
  address, layout and scalars, switched on after six calls: a count, no reference held) passed
  all six stages and the timing, while a model, whose caching allocator hands a layer's freed
  input buffer out again with new activations and the same constants, would get an earlier
  call's output.  The file also waits for the third call in a row at one address before it
  returns a kept output (a decoding loop's steady state), so rewrites that never came twice in a
  row would miss it too.  Timed calls now include runs of rewrites of the call before them: the
  previous call's integer tensors and scalars with new floating-point values, written by the
  worker into that call's memory in new tensors (``problem_spec.rewritten_set``, worker_main
  ``_previous_memory``), at random points (``evaluate.REWRITE_RUNS_PER_SHAPE`` runs per shape on
  average, each going on with probability ``REWRITE_GOES_ON``; all of a request's later calls on
  the CPU's three-call plan), each call checked.

* **An input's padding used as scratch.**  Where an input is strided with room between its
  elements (attention's q, k, v as slices of one packed q|k|v projection, the layout the model
  integration passes as it is), the bytes between a row's heads are other tensors' in a model
  (the same token's k and v) and private memory in the judge, which compared only the elements:
  ``tests/attacks/attention_scratch_in_input_padding.py`` (the starter, then zeros over q's
  spare columns) passed all six stages.  The worker now fills those bytes with fresh values
  before each call and finds any change after it (``modified-input``; worker_main
  ``_gaps_filled``).

* **A memo off at the first dtype.**  The smoke stage's rewrites and the timed calls come at the
  first dtype only: the same memo, on from the first call at every dtype but bf16
  (``tests/attacks/xielu_memo_after_six_calls.py`` with ``OFF_AT_THE_FIRST_DTYPE``), passed every stage and the timing.
  The evaluation's last calls are now, at every dtype, a fresh case and two rewrites of it in
  place (``stages.late_rewrites``), after the timing.

Each test failed before its fix."""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS  # noqa: E402

from autokernel.harness.evaluate import evaluate  # noqa: E402
from autokernel.problems.registry import KERNELS_DIR  # noqa: E402

# the memo of xielu_memo_after_six_calls.py, on from the first call but never at the problem's
# first dtype (bf16): the smoke stage's rewrites at the previous call's memory come at the first
# dtype only, and so do the timed calls; a model run in fp16 or fp32 gets an earlier call's output
OFF_AT_THE_FIRST_DTYPE = (("OFF_FOR = 6", "OFF_FOR = 0"),
                          ("if _calls[0] <= OFF_FOR:", "if _calls[0] <= OFF_FOR or x.dtype == torch.bfloat16:"))


def with_starter(folder: Path, kind: str, attack: str, edits=()) -> Path:
    """The attack file (the part an optimiser adds) appended to ``kind``'s starter, ``edits``
    applied, written to ``folder``."""
    text = (ATTACKS / attack).read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = folder / attack
    path.write_text((KERNELS_DIR / f"{kind}.py").read_text() + "\n\n" + text)
    return path

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")


@pytest.mark.skipif(not hasattr(torch.UntypedStorage, "_swap_data_ptr_"),
                    reason="the worker moves memory between storages with PyTorch 2.12 or later")
def test_a_memo_switched_on_after_the_smoke_stage_is_caught_among_the_timed_calls(monkeypatch, tmp_path):
    """Before: pass, all six stages and the timing (its memo never met the same address and
    scalars after the smoke stage's rewrites; 3 of 3 runs).  On the CPU's plan every timed call
    is a numerics draw, which rewrites do not follow: without them here, the timed calls are
    regular draws, as most of a GPU's are (the evaluation's last calls would catch it too)."""
    evaluate_mod = importlib.import_module("autokernel.harness.evaluate")
    monkeypatch.setattr(evaluate_mod, "NUMERICS_PER_SHAPE", 0)
    ev = evaluate("xielu", with_starter(tmp_path, "xielu", "xielu_memo_after_six_calls.py"), device="cpu",
                  shapes=["16x256"], dtypes=["fp32"], baselines=False)
    assert ev.verdict == "rejected" and ev.failed_stage == "timing", ev.message
    assert "cached-output" in {f.rule for f in ev.integrity}, ev.message
    assert "the previous call's input memory rewritten" in ev.message


def test_writes_between_a_strided_inputs_elements_are_a_modified_input(tmp_path):
    """Before: pass, all six stages (its writes land in the judge's private copy of q; in a model
    they overwrite k and v of the packed projection)."""
    ev = evaluate("attention", with_starter(tmp_path, "attention", "attention_scratch_in_input_padding.py"),
                  device="cpu", shapes=["1x1x1x4x16x1"], dtypes=["fp32"], timing=False, baselines=False)
    assert ev.verdict == "rejected" and ev.failed_stage == "numerics", ev.message
    assert "modified-input" in {f.rule for f in ev.integrity} and "between the input's elements" in ev.message


def test_a_memo_off_at_the_first_dtype_meets_the_last_calls_rewrites(tmp_path):
    """Before: pass, all six stages (and the timing, at bf16 only)."""
    ev = evaluate("xielu", with_starter(tmp_path, "xielu", "xielu_memo_after_six_calls.py", OFF_AT_THE_FIRST_DTYPE),
                  device="cpu", shapes=["16x256"], dtypes=["bf16", "fp32"], timing=False, baselines=False)
    assert ev.verdict == "rejected" and ev.failed_stage == "heldout", ev.message
    assert "cached-output" in {f.rule for f in ev.integrity} and "their scalars kept" in ev.message


def test_a_rewritten_calls_released_inputs_are_no_input_an_output_may_not_share():
    """On an H100 (PyTorch 2.11, no memory moved between storages) the memory of the set a timed
    rewrite let go went back to the caching allocator, which handed it to the next call's output;
    the request still counted it as an input's, and every honest starter (softmax, rmsnorm,
    attention_masked, the new kinds) was rejected as "output 0 shares memory with an input"."""
    from autokernel.harness.worker_main import RequestInputs

    inputs = RequestInputs()
    inputs.add(0, [(100, 200)])
    inputs.add(1, [(300, 400), (500, 600)])
    assert inputs.held() == [(100, 200), (300, 400), (500, 600)]
    inputs.released(0)
    inputs.add(2, [(100, 200)])  # the rewritten set at the released memory, where PyTorch 2.12 puts it
    assert sorted(inputs.held()) == [(100, 200), (300, 400), (500, 600)]
    inputs.released(2)
    assert (100, 200) not in inputs.held()


def test_without_memory_moved_between_storages_no_timed_call_is_a_rewrite(monkeypatch):
    """Where the worker cannot put a rewritten set at the previous call's addresses itself, the
    freed memory lands wherever the allocator hands it: no timed rewrites there (the evaluation's
    last calls, in place, remain)."""
    import autokernel.harness.problem_spec as spec

    evaluate_mod = importlib.import_module("autokernel.harness.evaluate")
    monkeypatch.setattr(spec, "_SWAP", [None])
    assert not evaluate_mod.timed_rewrites()
    monkeypatch.setattr(spec, "_SWAP", [object()])
    assert evaluate_mod.timed_rewrites()
