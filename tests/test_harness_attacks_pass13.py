"""Thirteenth red-team pass on the judge (CPU, Triton interpreter): the race rule of pass 12.

* It let a load of another program's store through when the writer ran any ordering atomic
  after its store and the reader any one before its load.  A kernel that kept its "last program
  finishes the row" counter with a plain load and store again, between two atomics on a scratch
  word of each program's own, passed: on a GPU atomics on different addresses order nothing
  (release and acquire pair up on one location).  The atomics must now meet on one address.
* That is not enough either: the same counter with every program's atomics on one flag per row
  (meeting, but nothing reads what they return) passed the new rule, and on a GPU the plain
  increments still lose updates.  Two programs of a launch that store different values to one
  address (plain stores) now race whatever orders them: whichever lands last stays.

* A red-team helper then found four more ways past the two rules, each wrong on a GPU, now
  ``tests/attacks/reduce_pass13_*.py``: the counter and the partials written by relaxed
  ``tl.atomic_xchg`` (atomics' stores were not recorded: a relaxed one that only writes is a plain
  store now, and one that only reads a plain load), the partials read back by
  ``tl.atomic_add(p, 0.0)`` (an atomic's read is a load now), and two accesses of different widths
  meeting inside one element (an int32 read of an int64's high half; a counter kept at two widths):
  every byte an access reaches is recorded now.  Its honest kernels (a last-program handoff, a
  ticketed look-back, split-K through atomics, overlapping matmul tiles) pass.

Each test failed before its fix."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS  # noqa: E402
from test_harness_attacks_pass12 import race_probe  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

PLAIN_COUNTER = "    c = tl.load(cnt_ptr + row)\n    tl.store(cnt_ptr + row, c + 1)\n"
# the plain counter between two atomics on a scratch word of the program's own
UNRELATED_ATOMICS = ("    tl.atomic_add(ws_ptr + row * SPLIT + j, 0.0)\n" + PLAIN_COUNTER
                     + "    tl.atomic_add(ws_ptr + row * SPLIT + j, 0.0)\n")

# the plain counter again, with an atomic of every program on one flag per row after its stores and
# before its loads: the atomics meet on one address, but nothing reads what they return, and the
# counter's increments are plain
ROW_FLAG = ("    tl.atomic_add(cnt_ptr + M + row, 0)\n" + PLAIN_COUNTER + "    tl.atomic_add(cnt_ptr + M + row, 0)\n")


def _run(tmp_path: Path, variants: dict[str, str]) -> list[str]:
    source = (ATTACKS / "reduce_pass12_split_row_plain_counter.py").read_text()
    assert PLAIN_COUNTER in source
    for name, counter in variants.items():
        (tmp_path / f"{name}.py").write_text(source.replace(PLAIN_COUNTER, counter))
    return race_probe(tmp_path, list(variants))


def test_atomics_on_addresses_of_their_own_do_not_order_a_handoff(tmp_path):
    """Before: the edit computed the right sums and passed the race rule."""
    assert _run(tmp_path, {"unrelated": UNRELATED_ATOMICS}) == ["unrelated InterpreterError True"]


def test_programs_that_store_different_values_to_one_address_race(tmp_path):
    """Before: passed the same-address rule (the flag's atomics meet) though the counter's plain
    increments lose updates on a GPU: two programs' plain stores to one address, with different
    values, leave whichever lands last."""
    source = (ATTACKS / "reduce_pass12_split_row_plain_counter.py").read_text()
    cnt = "    cnt = torch.zeros((M,), dtype=torch.int32, device=x.device)\n"
    launch = "    _split_sum[(M, split)](x, ws, cnt, out, N,"
    assert cnt in source and launch in source
    source = source.replace(cnt, "    cnt = torch.zeros((2 * M,), dtype=torch.int32, device=x.device)\n")
    source = source.replace("def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, N,", "def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, M, N,")
    source = source.replace(launch, "    _split_sum[(M, split)](x, ws, cnt, out, M, N,")
    assert "out_ptr, M, N," in source and "out, M, N," in source
    (tmp_path / "flagged.py").write_text(source.replace(PLAIN_COUNTER, ROW_FLAG))
    assert race_probe(tmp_path, ["flagged"]) == ["flagged InterpreterError True"]


def test_a_handoff_through_one_counter_is_ordered(tmp_path):
    """The honest form: every program's atomic on its row's counter orders its partial before
    the last program's reads (and a relaxed one would not)."""
    relaxed = "    c = tl.atomic_add(cnt_ptr + row, 1, sem='relaxed')\n"
    assert _run(tmp_path, {"counter": "    c = tl.atomic_add(cnt_ptr + row, 1)\n", "relaxed": relaxed}) == [
        "counter True", "relaxed InterpreterError True"]


BYPASSES = ["reduce_pass13_xchg_as_plain_store", "reduce_pass13_atomic_read_of_partials",
            "reduce_pass13_high_half_read", "reduce_pass13_counter_two_widths"]


def test_relaxed_atomic_stores_atomic_reads_and_other_widths_meet_the_race_rules():
    """Before: each computed the right sums under the interpreter and passed both rules."""
    assert race_probe(ATTACKS, BYPASSES) == [f"{name} InterpreterError True" for name in BYPASSES]


def test_honest_handoffs_through_atomics_pass():
    reduce = ["honest_reduce_pass13_last_program", "honest_reduce_pass13_lookback_ticket"]
    matmul = ["honest_matmul_pass13_split_k_atomic_add", "honest_matmul_pass13_overlap_tiles"]
    assert race_probe(ATTACKS, reduce) == [f"{name} True" for name in reduce]
    assert race_probe(ATTACKS, matmul, "matmul") == [f"{name} True" for name in matmul]
