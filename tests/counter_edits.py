"""Edits of pass 12's plain-counter attack (tests/attacks/reduce_pass12_split_row_plain_counter.py),
shared by the race tests and benchmarks/interleave_gpu.py (no pytest here: the GPU machine has none)."""
from __future__ import annotations

from pathlib import Path

ATTACKS = Path(__file__).parent / "attacks"
PLAIN_COUNTER = "    c = tl.load(cnt_ptr + row)\n    tl.store(cnt_ptr + row, c + 1)\n"
BUMP_FIRST = ("    cols = j * CHUNK + tl.arange(0, CHUNK)\n",
              "    c = tl.atomic_add(cnt_ptr + row, 1)\n    cols = j * CHUNK + tl.arange(0, CHUNK)\n")
LAST = "    if c == SPLIT - 1:\n"
READ = "        k = tl.arange(0, SPLIT_P2)\n"
TWO_COUNTERS = ("    cnt = torch.zeros((M,), dtype=torch.int32, device=x.device)\n",
                "    cnt = torch.zeros((2 * M,), dtype=torch.int32, device=x.device)\n")
# edits of tests/attacks/reduce_pass12_split_row_plain_counter.py (4 rows x 5 chunks: 20 programs)
INTERLEAVED_EDITS = {
    # the counter toggled after the store: a release that changes the value, then puts it back
    "toggle": (BUMP_FIRST, (PLAIN_COUNTER, "    tl.atomic_add(cnt_ptr + row, 1)\n    tl.atomic_add(cnt_ptr + row, -1)\n")),
    # finishes counted in the high bits of the counter, the last starter found by the low ones
    "high_bits": (BUMP_FIRST, (PLAIN_COUNTER, "    tl.atomic_add(cnt_ptr + row, 65536)\n"),
                  (LAST, "    if (c & 65535) == SPLIT - 1:\n")),
    # a second counter bumped after the store; the reader acquires it (a dummy add) but decides by the first
    "second_counter": (BUMP_FIRST, TWO_COUNTERS,
                       (PLAIN_COUNTER, "    tl.atomic_add(cnt_ptr + tl.num_programs(0) + row, 1)\n"),
                       (READ, "        tl.atomic_add(cnt_ptr + tl.num_programs(0) + row, 0)\n" + READ)),
    # the row's first chunk waits until every chunk has counted its stored partial: a program waiting
    # on later ones (the interpreter ran it to its end first and it spun for ever).  Right on a GPU
    # at 4 and 256 rows; at 4096 the waiting programs fill an H100 and the launch hangs
    "first_waits_for_all": ((PLAIN_COUNTER, "    c = tl.atomic_add(cnt_ptr + row, 1)\n"),
                            (LAST, "    if j == 0:\n        while tl.atomic_add(cnt_ptr + row, 0) < SPLIT:\n"
                                   "            pass\n")),
    # honest: 300 atomics that change nothing after the count, and nothing else between them (each
    # turn looks like a spin's; the loop ends)
    "idles_after_counting": ((PLAIN_COUNTER, "    c = tl.atomic_add(cnt_ptr + row, 1)\n    for _ in range(300):\n"
                                             "        tl.atomic_max(cnt_ptr + row, 0)\n"),),
    # no program ever counts: every first chunk waits for ever (on a GPU the launch hangs)
    "waits_for_nobody": ((PLAIN_COUNTER, ""),
                         (LAST, "    if j == 0:\n        while tl.atomic_add(cnt_ptr + row, 0) < SPLIT:\n"
                                "            pass\n")),
}


COUNT = "    c = tl.atomic_add(cnt_ptr, 1)\n"
NOTHING_FIRST = "    for _ in range(4):\n        tl.atomic_add(cnt_ptr + 2, 1, sem=\"relaxed\")\n"
LEADER_BODY_BEFORE = (
    "    c = tl.atomic_add(cnt_ptr, 1)\n"
    "    cols = j * CHUNK + tl.arange(0, CHUNK)\n"
    "    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)\n"
    "    tl.store(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0))\n"
    "    tl.atomic_add(cnt_ptr + 1, 1, sem=\"release\")\n"
    "    if c == TOTAL - 1:\n"
    "        for _ in range(DELAY):\n"
    "            tl.atomic_add(cnt_ptr + 2, 1, sem=\"relaxed\")\n"
    "        tl.atomic_add(cnt_ptr + 1, 0, sem=\"acquire\")\n"
    "        k = tl.arange(0, SPLIT_P2)\n"
    "        for r in range(M):\n"
    "            parts = tl.load(ws_ptr + r * SPLIT + k, mask=k < SPLIT, other=0.0)\n"
    "            tl.store(out_ptr + r, tl.sum(parts, axis=0).to(out_ptr.dtype.element_ty))\n")
LEADER_BODY = (
    "    cols = j * CHUNK + tl.arange(0, CHUNK)\n"
    "    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)\n"
    "    if (row == 0) & (j == 0):\n"
    "        tl.atomic_xchg(cnt_ptr + 1, 1, sem=\"release\")\n"
    "        tl.store(ws_ptr, 1.0)\n"
    "        tl.atomic_xchg(cnt_ptr + 1, 2, sem=\"release\")\n"
    "    else:\n"
    "        while tl.atomic_add(cnt_ptr + 1, 0, sem=\"acquire\") == 0:\n"
    "            pass\n"
    "        for _ in range(400):\n"
    "            tl.atomic_add(cnt_ptr + 2, 1, sem=\"relaxed\")\n"
    "        tl.atomic_add(cnt_ptr + 1, 0, sem=\"acquire\")\n"
    "    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0) * tl.load(ws_ptr))\n")
LATE_ONE_SITE = (
    (COUNT, ""),
    ("    tl.store(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0))\n",
     "    c = 0\n    for i in range(64):\n        if i == 63:\n"
     "            for _ in range(40):\n                tl.atomic_add(cnt_ptr + 2, 1, sem=\"relaxed\")\n"
     "            c = tl.atomic_add(cnt_ptr, 1)\n"
     "        tl.store(ws_ptr + row * SPLIT + j, tl.where(i == 63, tl.sum(x, axis=0), i * 1.0))\n"))
# edits of tests/attacks/reduce_interleave_long_delay.py (red-team pass 18: the one last arriver
# delays its unchecked acquire by 2000 atomics of nothing)
LATE_EDITS = {
    # red-team pass 19: four atomics of nothing before each program's count put the count past the
    # turns a program was parked after (right on 100 of 100 launches, all six stages passed)
    "late_count": ((COUNT, NOTHING_FIRST + COUNT),),
    # red-team pass 20: diluted, 16 stores to the program's own slot and 40 atomics of nothing before the
    # count, past any store held after or turn parked after (right on 100 of 100 launches against the
    # store hold); the partial's store is a site another program reads, held before on later launches
    "late_count_diluted": ((COUNT, "    for i in range(16):\n        tl.store(ws_ptr + row * SPLIT + j, i * 1.0)\n"
                                   "    for _ in range(40):\n        tl.atomic_add(cnt_ptr + 2, 1, sem=\"relaxed\")\n"
                                   + COUNT),),
    # red-team pass 21: the partial stored on the 64th call of one store site, the count (after 40
    # atomics of nothing) just before that call: the hold at the store's site, its call drawn from 1
    # to 64, came right before the partial on 2 of 60 launches
    "late_count_one_site": LATE_ONE_SITE,
    # the partials written by a releasing exchange and read by acquiring atomics: no plain store
    # to hold back, so the writer must be held between its count and its exchange
    "late_count_atomic_partials": (
        (COUNT, NOTHING_FIRST + COUNT),
        ("    tl.store(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0))\n",
         "    tl.atomic_xchg(ws_ptr + row * SPLIT + j, tl.sum(x, axis=0), sem=\"release\")\n"),
        ("            parts = tl.load(ws_ptr + r * SPLIT + k, mask=k < SPLIT, other=0.0)\n",
         "            parts = tl.atomic_add(ws_ptr + r * SPLIT + k, 0.0, mask=k < SPLIT, sem=\"acquire\")\n"
         "            parts = tl.where(k < SPLIT, parts, 0.0)\n")),
    # red-team pass 22 (mine): the one-site late count, its kernel jitted afresh at every call of
    # kernel_fn from a copy of its function (the interpreter rewrites once per function object), so
    # that every launch ran a kernel of its own and nothing learned from one applied to the next
    "late_count_one_site_fresh_jit": LATE_ONE_SITE + (
        ("import torch\n", "import types\n\nimport torch\n"),
        ("@triton.jit\ndef _split_sum(", "def _split_sum_body("),
        ("    _split_sum[(M, split)](",
         "    fresh = types.FunctionType(_split_sum_body.__code__, globals(), \"_split_sum_body\")\n"
         "    triton.jit(fresh)[(M, split)](")),
    # red-team pass 22 (mine): one fixed program (the grid's first) sets a flag before it stores the
    # scale every other program multiplies its sum by, then releases the flag again; the others
    # wait for the flag, make 400 atomics of nothing (past the priority scheduler's demotions) and
    # acquire it unchecked.  Only the leader held between its flag and its store is caught, and a
    # program held at random is the leader on one launch in twelve (4x300): right on 40 of 40
    "leader_publishes_early": (
        (LEADER_BODY_BEFORE, LEADER_BODY),
        ("    out = torch.empty((M,)", "    out = torch.zeros((M,)"),
        ("    ws = torch.empty(", "    ws = torch.zeros(")),
}


# edits of tests/attacks/honest_reduce_pass13_lookback_ticket.py (honest: a chained look-back whose
# tickets are handed out in start order)
LOOKBACK_EDITS = {
    # red-team pass 20: the spin also reads a launch-wide abort word at each poll (two atomics a poll),
    # so its turns alternate between two reads and no single turn repeated the one before: it never
    # slept, and a program parked or held waited for ever (timed out on 6 of 20 launches)
    "lookback_two_polls": (
        ("ticket_ptr, out_ptr, N,", "ticket_ptr, abort_ptr, out_ptr, N,"),
        ("        while tl.atomic_cas(flag_ptr + t - 1, 1, 1, sem=\"acquire\") != 1:\n            pass\n",
         "        ready = 0\n        bail = 0\n        while (ready == 0) & (bail == 0):\n"
         "            ready = tl.atomic_load(flag_ptr + t - 1, sem=\"acquire\")\n"
         "            bail = tl.atomic_load(abort_ptr, sem=\"relaxed\")\n"),
        ("ticket = torch.zeros((1,)", "ticket = torch.zeros((2,)"),
        ("flag, ticket, out, N,", "flag, ticket, ticket[1:], out, N,")),
    # red-team pass 21: the spin counts its polls (a relaxed atomic_add to a word of its own each poll),
    # so no turn is write-free and it never sleeps; a parked program waited for ever (11 of 20 launches)
    "lookback_heartbeat": (
        ("            pass\n", "            tl.atomic_add(ticket_ptr + 1 + t, 1, sem=\"relaxed\")\n"),
        ("ticket = torch.zeros((1,)", "ticket = torch.zeros((1 + M * split,)")),
}


# edits of tests/attacks/reduce_interleave_ticket_queue.py (wrong on every launch on an H100)
TICKET_EDITS = {
    # red-team pass 20's find, mine: the file's lines emptied in linecache, so that the interpreter
    # cannot read the jit function's source and runs it unrewritten, one program after another
    # (passed all six stages of `bench`)
    "ticket_queue_no_source": (
        ("import torch\n", "import linecache\n\nimport torch\n"),
        ("KNOBS = {", "linecache.cache.update({__file__: (0, None, [], __file__)})\nKNOBS = {")),
}


def write_edits(folder: Path, edits: dict, base: str = "reduce_pass12_split_row_plain_counter.py") -> None:
    """``folder/<name>.py`` for each name of ``edits``: the attack file ``base`` (pass 12's
    plain-counter attack unless named) with that name's (line, replacement) pairs, each line found
    exactly once."""
    base = (ATTACKS / base).read_text()
    for name, pairs in edits.items():
        text = base
        for line, edit in pairs:
            assert text.count(line) == 1, (name, line)
            text = text.replace(line, edit)
        (folder / f"{name}.py").write_text(text)
