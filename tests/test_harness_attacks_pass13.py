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
  ``tests/attacks/reduce_pass13_*.py`` and ``XCHG_EDITS``: the counter and the partials written by relaxed
  ``tl.atomic_xchg`` (atomics' stores were not recorded: a relaxed one that only writes is a plain
  store now, and one that only reads a plain load), the partials read back by
  ``tl.atomic_add(p, 0.0)`` (an atomic's read is a load now), and two accesses of different widths
  meeting inside one element (an int32 read of an int64's high half; a counter kept at two widths):
  every byte an access reaches is recorded now.  Its honest kernels (a last-program handoff, a
  ticketed look-back, split-K through atomics as an edit of ``honest_matmul_split_k.py``,
  overlapping matmul tiles) pass.

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


BYPASSES = ["reduce_pass13_atomic_read_of_partials", "reduce_pass13_high_half_read",
            "reduce_pass13_counter_two_widths"]
# the plain counter and the partials written by relaxed tl.atomic_xchg (the partial through an int32
# view of its bits: the interpreter has no fp32 xchg): a relaxed xchg whose result nobody reads is a
# store on a GPU, and the counter loses updates as the plain one does
XCHG_EDITS = (
    ("    tl.store(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0))\n",
     "    tl.atomic_xchg(ws_ptr.to(tl.pointer_type(tl.int32)) + row * SPLIT + j,\n"
     "                   tl.sum(x, axis=0).to(tl.int32, bitcast=True), sem='relaxed')\n"),
    ("    tl.store(cnt_ptr + row, c + 1)\n", "    tl.atomic_xchg(cnt_ptr + row, c + 1, sem='relaxed')\n"))
HONEST_REDUCE = ["honest_reduce_pass13_lookback_ticket"]
HONEST_MATMUL = ["honest_matmul_pass13_overlap_tiles"]
# the shipped honest split-K matmul with its K slices added into one fp32 buffer by tl.atomic_add
SPLIT_K_EDITS = (
    ("    tl.store(w_ptr + ps * M * N + rm[:, None] * N + rn[None, :], acc, mask=mask)\n",
     "    tl.atomic_add(w_ptr + rm[:, None] * N + rn[None, :], acc, mask=mask, sem='relaxed')\n"),
    ("    work = torch.empty((SPLIT_K, M, N), dtype=torch.float32, device=a.device)\n",
     "    work = torch.zeros((1, M, N), dtype=torch.float32, device=a.device)\n"),
    ("SPLITS=SPLIT_K, BLOCK=256)", "SPLITS=1, BLOCK=256)"))


def _flagged(source: str) -> str:
    """The plain counter with every program's atomics on one flag per row (past the M counters)."""
    cnt = "    cnt = torch.zeros((M,), dtype=torch.int32, device=x.device)\n"
    launch = "    _split_sum[(M, split)](x, ws, cnt, out, N,"
    signature = "def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, N,"
    assert cnt in source and launch in source and signature in source
    source = source.replace(cnt, "    cnt = torch.zeros((2 * M,), dtype=torch.int32, device=x.device)\n")
    source = source.replace(signature, "def _split_sum(x_ptr, ws_ptr, cnt_ptr, out_ptr, M, N,")
    return source.replace(launch, "    _split_sum[(M, split)](x, ws, cnt, out, M, N,").replace(PLAIN_COUNTER, ROW_FLAG)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, str]:
    """Every kernel of this file run once under interpreter_as_gpu (two processes in all, each
    one pays for importing torch and Triton): name -> "True" (right result) or "InterpreterError
    True" (a RaceError)."""
    import shutil

    folder = tmp_path_factory.mktemp("pass13")
    source = (ATTACKS / "reduce_pass12_split_row_plain_counter.py").read_text()
    assert PLAIN_COUNTER in source
    edits = {"unrelated": source.replace(PLAIN_COUNTER, UNRELATED_ATOMICS), "flagged": _flagged(source),
             "counter": source.replace(PLAIN_COUNTER, "    c = tl.atomic_add(cnt_ptr + row, 1)\n"),
             "relaxed": source.replace(PLAIN_COUNTER, "    c = tl.atomic_add(cnt_ptr + row, 1, sem='relaxed')\n"),
             "xchg": source}
    for line, edit in XCHG_EDITS:
        assert edits["xchg"].count(line) == 1
        edits["xchg"] = edits["xchg"].replace(line, edit)
    split_k = (ATTACKS / "honest_matmul_split_k.py").read_text()
    for line, edit in SPLIT_K_EDITS:
        assert split_k.count(line) == 1
        split_k = split_k.replace(line, edit)
    for name, text in {**edits, "split_k_atomic_add": split_k}.items():
        (folder / f"{name}.py").write_text(text)
    for name in BYPASSES + HONEST_REDUCE + HONEST_MATMUL:
        shutil.copyfile(ATTACKS / f"{name}.py", folder / f"{name}.py")
    lines = (race_probe(folder, [*edits, *BYPASSES, *HONEST_REDUCE])
             + race_probe(folder, ["split_k_atomic_add", *HONEST_MATMUL], "matmul"))
    return dict(line.split(" ", 1) for line in lines)


RACE = "InterpreterError True"


def test_atomics_on_addresses_of_their_own_do_not_order_a_handoff(verdicts):
    """Before: the edit computed the right sums and passed the race rule."""
    assert verdicts["unrelated"] == RACE


def test_programs_that_store_different_values_to_one_address_race(verdicts):
    """Before: passed the same-address rule (the flag's atomics meet) though the counter's plain
    increments lose updates on a GPU: two programs' plain stores to one address, with different
    values, leave whichever lands last."""
    assert verdicts["flagged"] == RACE


def test_a_handoff_through_one_counter_is_ordered(verdicts):
    """The honest form: every program's atomic on its row's counter orders its partial before
    the last program's reads (and a relaxed one would not)."""
    assert (verdicts["counter"], verdicts["relaxed"]) == ("True", RACE)


def test_relaxed_atomic_stores_atomic_reads_and_other_widths_meet_the_race_rules(verdicts):
    """Before: each computed the right sums under the interpreter and passed both rules."""
    assert {name: verdicts[name] for name in BYPASSES + ["xchg"]} == {name: RACE for name in BYPASSES + ["xchg"]}


def test_honest_handoffs_through_atomics_pass(verdicts):
    """(The last-program handoff through an atomic counter is ``counter`` above.)"""
    honest = HONEST_REDUCE + HONEST_MATMUL + ["split_k_atomic_add"]
    assert {name: verdicts[name] for name in honest} == {name: "True" for name in honest}
