"""Thirtieth red-team pass on the judge (CPU, Triton interpreter): pass 29's rewrites of the same
input memory, attacked where the GPU machines judge (PyTorch 2.11: no memory moved between
storages; ``AUTOKERNEL_JUDGE_NO_MEMORY_SWAP=1`` makes a CPU worker judge so).

* **Rewrites that never met the old addresses.**  Without ``_swap_data_ptr_`` the worker copied a
  rewritten set into new allocations, which met the previous call's addresses only where the
  allocator happened to hand that memory out first.  ``tests/attacks/memo_by_address_third_call_in_a_row.py``
  (a starter behind a memo keyed on the tensors' addresses and layouts plus the scalars, a kept
  output returned at the third call in a row with one key) passed all six stages and the timing
  with softcap and relative_position_bias (fp32).  The worker now frees the inputs first, before
  the outputs the history lets go, and allocates their memory again until a storage lands at the
  old address (worker_main ``_landed``, ``LANDING_TRIES`` tries), making the rewritten tensors over
  it (``problem_spec._made_over``).

* **A memo off at the smallest target shape.**  The smoke stage's rewrites and the evaluation's
  last calls came at the smallest target shape only; the timed rewrites come at the first dtype
  only, and none on the CPU's plan or on PyTorch 2.11.  The same memo, off at the shape of its
  first call (smoke's), passed all six stages and the timing with xielu (every dtype, with and
  without memory moves).  The last calls are now a fresh case and its rewrites at every target
  shape and dtype.

* **A memo that waits for the fourth call in a row.**  The last calls rewrote each fresh case
  twice: the memo with ``HIT_AT = 4`` passed everything (xielu with memory moves, softcap without).
  Their runs now have any length (``stages.late_rewrite_count``: two, then one more with
  probability ``LATE_REWRITE_GOES_ON``, at most ``LATE_REWRITES_MOST``).

* **A memo that waits for a key to come back after another.**  A model calls a kernel once per
  layer: a layer's buffer comes back at the next step after the other layers' calls.  The judge's
  rewrites came right after the call they rewrite, and
  ``tests/attacks/memo_by_address_after_other_calls.py`` (a kept output returned where its key
  comes back with another key's call in between) passed all six stages and the timing with xielu
  (every dtype, with and without memory moves).  The last calls at each shape and dtype are now one
  request: a fresh case, its run of rewrites (each in the memory of the call before), another fresh
  case, and one more rewrite in the memory of the run's last call (``stages._late_sequence``; the
  worker's ``rewrites`` may name the call whose memory a set takes, ``rewrite_sources``).

* **A memo that waits for two or more other calls** (left open by the pass, closed since):
  the come-back memo edited to wait for two other calls (``after_many_other_calls``) passed all six
  stages and the timing with xielu: one other call came between a run's last rewrite and the call
  in its memory.  At one shape and dtype drawn per evaluation, the gap is now log-uniform from 2 to
  the device's ``COME_BACK_MOST`` (``stages.come_back_gap``).

* **A memo that waits for known calls in between** (found after the gap, closed since): the
  come-back memo edited to hit only where every call in between had a key it had already seen
  (``after_known_calls``), as a model's layers do from the third decoding step on, passed all six
  stages with softmax, rmsnorm and softcap: the gap's cases were fresh.  They now come back too,
  round after round, each in the memory of its own call in the round before
  (``stages.come_back_rounds``: at least two rounds).

* **A memo that waits for other calls with its key's own scalars** (red-team, 2026-12-07, after the
  rounds): the come-back memo edited to hit only where every call in between had the key's scalars
  (``after_calls_with_its_scalars``), as one model's layers share their eps or soft cap, passed all
  six stages with rmsnorm and softcap: no two of the judge's fresh cases share their scalars.  With
  probability ``COME_BACK_SHARED`` the rounds' cases now share the first case's scalars and
  integer tensors (``stages.come_back_shares_scalars``).

Each attack test failed before its fix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks_pass29 import with_starter  # noqa: E402

from autokernel.harness import stages  # noqa: E402
from autokernel.harness.evaluate import evaluate  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

MEMO = "memo_by_address_third_call_in_a_row.py"
COME_BACK_MEMO = "memo_by_address_after_other_calls.py"

# the memo off at the shape of its first call (the smoke stage's: the smallest target shape)
OFF_AT_THE_FIRST_SHAPE = (("def _on(args):\n    return True",
                           "_first_shape = []\n\n\ndef _on(args):\n    if not _first_shape:\n"
                           "        _first_shape.append(tuple(args[0].shape))\n"
                           "    return tuple(args[0].shape) != _first_shape[0]"),)
FOURTH_IN_A_ROW = (("HIT_AT = 3", "HIT_AT = 4"),)


def after_many_other_calls(others: int) -> tuple:
    """The come-back memo's edits that return a kept output only where its key comes back after
    ``others`` calls or more with other keys in between (left open by the pass)."""
    return (("_previous_key = [None]\n",
             f"_previous_key = [None]\n_seen_at = {{}}\n_calls = [0]\nOTHER_CALLS = {others}\n"),
            ("    came_back = key in _kept and _previous_key[0] != key\n",
             "    _calls[0] += 1\n    came_back = key in _kept and _calls[0] - _seen_at[key] > OTHER_CALLS\n"
             "    _seen_at[key] = _calls[0]\n"))


def after_known_calls(seen: int = 1, others: int = 2, never_in_a_row: bool = False) -> tuple:
    """The come-back memo's edits that return a kept output only where its key comes back after
    ``others`` calls or more, each with a key seen ``seen`` times or more before that call; with
    ``never_in_a_row``, only for a key never called twice in a row (no layer of a model is, and
    the judge's runs are)."""
    in_a_row = " and key not in _in_a_row" if never_in_a_row else ""
    return (("_previous_key = [None]\n",
             f"_previous_key = [None]\n_history = []\n_seen = {{}}\n_in_a_row = set()\n\n\n"
             f"def _known_in_between(key):\n"
             f"    at = [i for i, (k, _) in enumerate(_history) if k == key]\n"
             f"    between = _history[at[-1] + 1:] if at else []\n"
             f"    return len(between) >= {others} and all(known for _, known in between)\n"),
            ("    came_back = key in _kept and _previous_key[0] != key\n",
             f"    if _previous_key[0] == key:\n        _in_a_row.add(key)\n"
             f"    came_back = key in _kept and _previous_key[0] != key and _known_in_between(key){in_a_row}\n"
             f"    _history.append((key, _seen.get(key, 0) >= {seen}))\n"
             f"    _seen[key] = _seen.get(key, 0) + 1\n"))


def after_calls_with_its_scalars(others: int = 2) -> tuple:
    """The come-back memo's edits that return a kept output only where its key comes back after
    ``others`` calls or more, every one of them with the key's own scalars (one model's layers
    share their eps or soft cap)."""
    return (("_previous_key = [None]\n",
             "_previous_key = [None]\n_scalars_seen = []\n\n\n"
             "def _scalars(args):\n    return tuple(a for a in args if not isinstance(a, torch.Tensor))\n\n\n"
             "def _own_scalars_in_between(key, scalars):\n"
             "    between = []\n"
             "    for k, s in reversed(_scalars_seen):\n"
             "        if k == key:\n"
             f"            return len(between) >= {others} and all(b == scalars for b in between)\n"
             "        between.append(s)\n"
             "    return False\n"),
            ("    came_back = key in _kept and _previous_key[0] != key\n",
             "    came_back = key in _kept and _previous_key[0] != key and _own_scalars_in_between(key, _scalars(args))\n"
             "    _scalars_seen.append((key, _scalars(args)))\n"))


def assert_caught_at_the_last_calls(kind: str, path: Path) -> None:
    """Judged at fp32 without the timing: rejected as a cached output at the evaluation's last
    calls (reported as the stage they follow, the held-out one)."""
    ev = evaluate(kind, path, device="cpu", dtypes=["fp32"], timing=False, baselines=False)
    assert ev.verdict == "rejected" and ev.failed_stage == "heldout", ev.message
    assert "cached-output" in {f.rule for f in ev.integrity} and "an earlier call's inputs" in ev.message


def by_the_weights_object() -> tuple:
    """The come-back memo's edits (rmsnorm: x, weight, eps) that return a kept output only where
    the weight is the very object it was computed with, as a model hands a layer's parameter at
    every step (open: the worker makes new tensor objects for every call)."""
    return (("    came_back = key in _kept and _previous_key[0] != key\n",
             "    came_back = key in _kept and _previous_key[0] != key and _kept[key][0] is args[1]\n"),
            ("        _kept[key] = _computed(*args).contiguous()\n    kept = _kept[key]\n",
             "        _kept[key] = (args[1], _computed(*args).contiguous())\n    kept = _kept[key][1]\n"))


# judged in a process of its own, whose workers start with the variable set (a forkserver started by
# an earlier test would not have it)
_JUDGE_WITHOUT_MEMORY_MOVES = """
import json, sys
from autokernel.harness import stages
from autokernel.harness.evaluate import evaluate
kind, path, dtypes, goes_on = sys.argv[1], sys.argv[2], sys.argv[3].split(","), float(sys.argv[4])
stages.LATE_REWRITE_GOES_ON = goes_on
ev = evaluate(kind, path, device="cpu", dtypes=dtypes, timing=False, baselines=False)
print(json.dumps({"verdict": ev.verdict, "stage": ev.failed_stage, "rules": sorted({f.rule for f in ev.integrity}),
                  "message": ev.message}))
"""


def judged_without_memory_moves(kind: str, path: Path, dtypes: str = "fp32",
                                goes_on: float = stages.LATE_REWRITE_GOES_ON) -> dict:
    env = dict(os.environ, AUTOKERNEL_JUDGE_NO_MEMORY_SWAP="1", TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", _JUDGE_WITHOUT_MEMORY_MOVES, kind, str(path), dtypes, str(goes_on)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# where the CPU's allocator merged a freed block with a free neighbour the rewrite lands elsewhere
# (``_landed`` tries four allocations): every dtype, so that some of the last calls land
EVERY_DTYPE = "bf16,fp16,fp32"


def caught(got: dict) -> bool:
    """Rejected as a cached output, or incorrect: a key the memo met again where a landing missed
    and the allocator put another set at a remembered address."""
    return got["verdict"] == "incorrect" or (got["verdict"] == "rejected" and "cached-output" in got["rules"])


@pytest.mark.parametrize("kind", ["softcap", "relative_position_bias"])
def test_a_memo_by_address_meets_the_old_addresses_without_memory_moves(tmp_path, kind):
    """Before: pass, all six stages and the timing (fp32; the rewrites' copies landed elsewhere)."""
    got = judged_without_memory_moves(kind, with_starter(tmp_path, kind, MEMO), EVERY_DTYPE)
    assert caught(got) and got["stage"] == "heldout", got["message"]


def test_a_rewritten_input_is_made_over_the_memory_it_is_given(monkeypatch):
    """Without memory moves the worker hands ``fresh_tensor`` a storage it allocated at the old
    address: the tensor is made over it (no allocation of its own), strided layouts too."""
    import autokernel.harness.problem_spec as spec

    monkeypatch.setattr(spec, "_SWAP", [None])
    source = torch.randn(6, 10)[:, :7]  # a row stride past the row
    memory = torch.empty(6 * 10 * 4 - 3 * 4, dtype=torch.uint8).untyped_storage()
    made = spec.fresh_tensor(source, torch.Tensor.copy_, memory)
    assert made.data_ptr() == memory.data_ptr() and made.stride() == source.stride()
    assert torch.equal(made, source) and made.storage_offset() == 0 and made._base is None
    assert spec.fresh_tensor(source, torch.Tensor.copy_, torch.empty(8, dtype=torch.uint8).untyped_storage()) \
        .data_ptr() != memory.data_ptr()  # a storage of another size: allocated as ever


def test_a_memo_off_at_the_smallest_target_shape_meets_the_last_calls(tmp_path):
    """Before: pass, all six stages and the timing (every dtype; with and without memory moves)."""
    ev = evaluate("xielu", with_starter(tmp_path, "xielu", MEMO, OFF_AT_THE_FIRST_SHAPE), device="cpu",
                  dtypes=["fp32"], timing=False, baselines=False)
    assert ev.verdict == "rejected" and ev.failed_stage == "heldout", ev.message
    assert "cached-output" in {f.rule for f in ev.integrity} and "shape=16x256" in ev.message


def test_a_memo_off_at_the_smallest_target_shape_is_caught_without_memory_moves(tmp_path):
    """Without memory moves the CPU's allocator decides where a rewrite lands (glibc, not a
    caching allocator): this memo, met only at the larger shapes, passed one evaluation in about
    seven here (1 of 6 and 1 of 7 runs, 2026-12-07), so up to three evaluations are judged, and one
    must catch it (the first that does ends the test: the verdict can no longer change).  With
    memory moves (the test above) every evaluation does."""
    path = with_starter(tmp_path, "xielu", MEMO, OFF_AT_THE_FIRST_SHAPE)
    got = []
    for _ in range(3):
        got.append(judged_without_memory_moves("xielu", path, EVERY_DTYPE))
        if caught(got[-1]):
            break
    assert any(caught(g) for g in got), [g["message"] for g in got]


def test_a_memo_that_waits_for_the_fourth_call_in_a_row_meets_a_longer_run(tmp_path, monkeypatch):
    """Before: pass, all six stages and the timing (every run two rewrites long).  The runs' length
    is drawn: here every run goes on to four, so that the test does not depend on a draw."""
    monkeypatch.setattr(stages, "_late_rng", type("Always", (), {"random": staticmethod(lambda: 0.0)})())
    monkeypatch.setattr(stages, "LATE_REWRITES_MOST", 4)
    ev = evaluate("xielu", with_starter(tmp_path, "xielu", MEMO, FOURTH_IN_A_ROW), device="cpu",
                  dtypes=["fp32"], timing=False, baselines=False)
    assert ev.verdict == "rejected" and ev.failed_stage == "heldout", ev.message
    assert "cached-output" in {f.rule for f in ev.integrity}, ev.message


def test_the_last_calls_runs_have_any_length(monkeypatch):
    import random

    monkeypatch.setattr(stages, "_late_rng", random.Random(30))
    counts = [stages.late_rewrite_count() for _ in range(2000)]
    assert min(counts) == stages.LATE_REWRITES and max(counts) <= stages.LATE_REWRITES_MOST
    assert sum(c >= 6 for c in counts) > 50  # P = 0.5 ** 4 each
    assert sum(counts) / len(counts) < stages.LATE_REWRITES + 1.1  # one more on average: the cost


def test_a_memo_that_waits_for_a_key_to_come_back_after_another_is_caught(tmp_path):
    """Before: pass, all six stages and the timing (every dtype)."""
    assert_caught_at_the_last_calls("xielu", with_starter(tmp_path, "xielu", COME_BACK_MEMO))


def test_a_memo_that_waits_for_a_key_to_come_back_is_caught_without_memory_moves(tmp_path):
    """Before: pass, all six stages and the timing (every dtype)."""
    got = judged_without_memory_moves("softcap", with_starter(tmp_path, "softcap", COME_BACK_MEMO), EVERY_DTYPE)
    assert caught(got), got["message"]


def test_a_rewrite_names_the_call_whose_memory_it_takes():
    from autokernel.harness.worker_main import rewrite_sources

    assert rewrite_sources([1, 2, [5, 3]], 6) == {1: 0, 2: 1, 5: 3}
    assert rewrite_sources([0, [2, 2], [3, 4], [7, 1]], 6) == {}  # no earlier call, or past the request


@pytest.mark.parametrize("waits_for, gap", [(2, 3), (9, 12)])
def test_a_memo_that_waits_for_several_other_calls_meets_a_longer_gap(tmp_path, monkeypatch, waits_for, gap):
    """Before: pass, all six stages and the timing (one other call before every come-back).  The
    long gap is drawn: here it is set, so that the test does not depend on a draw."""
    monkeypatch.setattr(stages, "come_back_gap", lambda device: gap)
    path = with_starter(tmp_path, "xielu", COME_BACK_MEMO, after_many_other_calls(waits_for))
    assert_caught_at_the_last_calls("xielu", path)


def test_the_long_gap_is_log_uniform_up_to_the_devices_most(monkeypatch):
    import math
    import random

    monkeypatch.setattr(stages, "_late_rng", random.Random(31))
    for device in ("cpu", "cuda:0"):
        most = stages.COME_BACK_MOST["cuda" if device.startswith("cuda") else "cpu"]
        gaps = [stages.come_back_gap(device) for _ in range(4000)]
        assert min(gaps) == 2 and max(gaps) == most
        for k in (4, most // 2):  # P(gap >= k) = 1 - log(k / 2) / log((most + 1) / 2)
            share = sum(g >= k for g in gaps) / len(gaps)
            assert abs(share - (1 - math.log(k / 2) / math.log((most + 1) / 2))) < 0.04, (device, k, share)


@pytest.mark.parametrize("kind, seen, rounds, never_in_a_row", [
    ("softcap", 1, 2, False), ("rmsnorm", 2, 3, False), ("xielu", 1, 2, True)])
def test_a_memo_that_waits_for_known_calls_in_between_meets_the_gaps_rounds(tmp_path, monkeypatch, kind, seen,
                                                                              rounds, never_in_a_row):
    """Before: pass, all six stages (fp32, the gap set to 8): the gap's cases were fresh, never seen.
    The memo that leaves a key called twice in a row alone is not a before/after test: with the
    rounds first built (after a run of the first case, so that only the run's key came back with
    every key in between seen) it was caught too, by chance: on the CPU some fresh cases land at
    addresses seen before, which made the last of the keys in between known at another layer's
    come-back.  The rounds now come first, every case fresh, the run last, so that the catch rests
    on no such chance.  The rounds are drawn: here they are set, the fewest that meet the memo."""
    monkeypatch.setattr(stages, "come_back_gap", lambda device: 8)
    monkeypatch.setattr(stages, "come_back_rounds", lambda gap, device: rounds)
    path = with_starter(tmp_path, kind, COME_BACK_MEMO, after_known_calls(seen, never_in_a_row=never_in_a_row))
    assert_caught_at_the_last_calls(kind, path)


def test_the_gaps_rounds_are_log_uniform_within_the_devices_most_calls(monkeypatch):
    import math
    import random

    monkeypatch.setattr(stages, "_late_rng", random.Random(35))
    for device in ("cpu", "cuda:0"):
        most_calls = stages.COME_BACK_CALLS_MOST["cuda" if device.startswith("cuda") else "cpu"]
        for gap in (2, 7, 40, 96):
            cap = max(stages.COME_BACK_ROUNDS, most_calls // (gap + 1))
            rounds = [stages.come_back_rounds(gap, device) for _ in range(4000)]
            assert min(rounds) == stages.COME_BACK_ROUNDS and max(rounds) == cap, (device, gap)
            for v in range(3, cap + 1, 2):  # P(rounds >= v) = 1 - log(v / 2) / log((cap + 1) / 2)
                share = sum(r >= v for r in rounds) / len(rounds)
                assert abs(share - (1 - math.log(v / 2) / math.log((cap + 1) / 2))) < 0.04, (device, gap, v, share)


def test_the_gaps_cases_share_the_first_cases_scalars_half_the_time(monkeypatch):
    import random

    monkeypatch.setattr(stages, "_late_rng", random.Random(36))
    share = sum(stages.come_back_shares_scalars() for _ in range(4000)) / 4000
    assert abs(share - stages.COME_BACK_SHARED) < 0.03


@pytest.mark.parametrize("kind", ["rmsnorm", "softcap"])
def test_a_memo_that_waits_for_layers_with_its_own_scalars_meets_shared_scalars(tmp_path, monkeypatch, kind):
    """Before: pass, all six stages (fp32; red-team, 2026-12-07): no two fresh cases of the judge's
    share their scalars (eps, the cap), where one model's layers all do.  Shared here, not drawn."""
    monkeypatch.setattr(stages, "come_back_shares_scalars", lambda: True)
    path = with_starter(tmp_path, kind, COME_BACK_MEMO, after_calls_with_its_scalars())
    assert_caught_at_the_last_calls(kind, path)


@pytest.mark.xfail(strict=True, reason="open (red-team, 2026-12-07): no call of the judge's hands the kernel an "
                   "object it had before; see tests/attacks_open/README.md")
def test_a_memo_that_waits_for_the_weights_very_object_is_caught(tmp_path):
    """Passes every stage today (three of three, fp32); strict, so that a judge that catches it
    turns this into a failure to move to a plain test."""
    assert_caught_at_the_last_calls("rmsnorm", with_starter(tmp_path, "rmsnorm", COME_BACK_MEMO, by_the_weights_object()))
