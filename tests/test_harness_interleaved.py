"""A launch's programs run interleaved at their atomics (``harness/interpreter_interleave.py``).

Passes 14 and 16 left four kernels open that are right only because the interpreter ran programs
one after another: a ticket queue carrying a row's sum across tickets, and three "last program to
arrive reads the partials" counters bumped before the partial is stored, whose writers release
after their stores by a change the reader never checks (a toggle +1/-1, finishes counted in the
high bits, a second counter).  Each passed before (the kernels below computed the right sums, or
passed all six stages); each is now a wrong sum or a ``RaceError`` on a share of launches (78-88
of 100; red-team passes 17, 18 and 19's, 28-98).  A spin-wait on a later program hung before; it is
a ``DeadlockError`` now only where a GPU would hang too (a few programs resident), as is a launch
whose programs all wait on a value none changes.  benchmarks/interleave_gpu.py runs the same
kernels on a GPU (BENCHMARKS.md, twenty-third session)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton.language as tl

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS  # noqa: E402
from counter_edits import (INTERLEAVED_EDITS as EDITS, LATE_EDITS, LOOKBACK_EDITS, TICKET_EDITS,  # noqa: E402
                           write_edits)

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

# launches per kernel (24 where not named): the slow ones fewer, the rarely caught ones more.  Each
# threshold below fails an unchanged judge on fewer than 1 in 1000 runs at the lowest catch rate its test
# names (late_count_one_site's on 2 in 100 at 7 of 60).  The whole probe took 770 s on an AVX2 AMD EPYC
# beside other work (2026-12-07; the fixture's 600 s limit then failed every test of this file): the
# diluted late count 78 s for 80 launches, the heartbeat look-back 105 s for 12, the atomic-poll
# look-back 77 s for 24, so those and two kernels caught often were cut to the counts here.  Since a
# kernel's launches stop once its test's CATCHES are in, the probe takes 220 s alone on that machine
# (the honest look-backs' launches, which must all be right, are most of it).
PROBE_TIMEOUT_S = 1500
# the full judge's limit for an answer in the two tests that run it: the honest look-back chain's
# edges stage took over 120 s there with another job beside CI (a verdict, not a hang guard: a
# ticket queue judged too slowly would be "timeout", not "incorrect")
JUDGE_STAGE_S = 360
LAUNCHES = {"waits_for_nobody": 4, "idles_after_counting": 4, "sleep_barrier": 80, "delay": 80,
            "first_waits_for_all": 80, "long_delay": 30, "lookback_busy_spin": 8, "late_count": 40,
            "late_count_atomic_partials": 60, "late_count_diluted": 40, "ticket_queue_no_source": 24,
            "late_count_one_site": 60, "leader_publishes_early": 40, "late_count_one_site_fresh_jit": 24,
            "swap_read": 30, "sleeping_reader": 60, "late_count_sleeping_reader": 60, "sleeping_reader_used": 60,
            "fresh_source": 40, "work_queue_tuple": 8,
            "def_in_string": 8, "lookback_heartbeat": 6, "lookback_atomic_poll": 8}
# what each "is caught" test below asks of its kernel: at least that many launches caught (wrong or a
# RaceError) within its LAUNCHES.  The probe stops a kernel's launches once that many are in: the test's
# verdict is the one the remaining launches could not change, at a fraction of the time (most kernels
# are caught on a quarter to nine tenths of their launches).
CATCHES = {"toggle": 6, "high_bits": 6, "second_counter": 6, "ticket_queue": 6, "first_atomic_barrier": 6,
           "sleep_barrier": 2, "delay": 1, "long_delay": 1, "late_count": 8, "late_count_atomic_partials": 3,
           "late_count_diluted": 2, "late_count_one_site": 3, "late_count_one_site_fresh_jit": 2,
           "leader_publishes_early": 3, "swap_read": 3, "sleeping_reader": 3, "late_count_sleeping_reader": 3,
           "sleeping_reader_used": 3, "fresh_source": 3}
# kernels whose test asks that each of these outcomes occurs: launches stop once all have
OUTCOMES_SEEN = {"first_waits_for_all": ("right", "DeadlockError")}
PROBE = (
    "import importlib.util, sys, torch\n"
    "from autokernel.harness import interpreter_as_gpu\n"
    "interpreter_as_gpu.install()\n"
    "for name, launches, catches, outcomes in (arg.split(':') for arg in sys.argv[2:]):\n"
    "    spec = importlib.util.spec_from_file_location(name, sys.argv[1] + f'/{name}.py')\n"
    "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
    "    seen = []\n"
    "    for _ in range(int(launches)):\n"
    "        x = torch.randn(4, 300)\n"
    "        try:\n"
    "            seen.append('right' if torch.allclose(m.kernel_fn(x), x.sum(1), atol=1e-3) else 'wrong')\n"
    "        except Exception as exc:\n"
    "            seen.append(next((e for e in ('RaceError', 'DeadlockError', 'NotCompiledError') if e in repr(exc)),\n"
    "                             repr(exc)[:200].replace(' ', '_')))\n"
    "        if int(catches) and sum(o in ('wrong', 'RaceError') for o in seen) >= int(catches):\n"
    "            break\n"
    "        if outcomes and set(outcomes.split('+')) <= set(seen):\n"
    "            break\n"
    "    print(name, ' '.join(seen))\n")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, list[str]]:
    """Each kernel launched ``LAUNCHES`` times under interpreter_as_gpu, in one process, or until
    its ``CATCHES`` or ``OUTCOMES_SEEN`` are in: name -> what each launch gave (right, wrong,
    RaceError, DeadlockError)."""
    folder = tmp_path_factory.mktemp("interleaved")
    write_edits(folder, EDITS)
    write_edits(folder, LATE_EDITS, "reduce_interleave_long_delay.py")
    write_edits(folder, LOOKBACK_EDITS, "honest_reduce_pass13_lookback_ticket.py")
    write_edits(folder, TICKET_EDITS, "reduce_interleave_ticket_queue.py")
    whole = ("ticket_queue", "first_atomic_barrier", "sleep_barrier", "delay", "long_delay", "def_in_string",
             "swap_read")
    for name in whole:
        (folder / f"{name}.py").write_text((ATTACKS / f"reduce_interleave_{name}.py").read_text())
    for name, text in sleeping_readers().items():
        (folder / f"{name}.py").write_text(text)
        whole += (name,)
    (folder / "fresh_source.py").write_text(fresh_sources(LAUNCHES["fresh_source"]))
    whole += ("fresh_source",)
    for name in ("lookback_busy_spin", "cooperative_barrier", "work_queue_tuple"):
        whole += (name,)
        (folder / f"{name}.py").write_text((ATTACKS / f"honest_reduce_{name}.py").read_text())
    if hasattr(tl, "atomic_poll"):
        whole += ("lookback_atomic_poll",)
        (folder / "lookback_atomic_poll.py").write_text((ATTACKS / "honest_reduce_lookback_atomic_poll.py").read_text())
    names = (*EDITS, *LATE_EDITS, *LOOKBACK_EDITS, *TICKET_EDITS, *whole)
    launches = [f"{name}:{LAUNCHES.get(name, 24)}:{CATCHES.get(name, 0)}:{'+'.join(OUTCOMES_SEEN.get(name, ()))}"
                for name in names]
    done = subprocess.run([sys.executable, "-c", PROBE, str(folder), *launches], capture_output=True,
                          text=True, timeout=PROBE_TIMEOUT_S, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.split()[0]: line.split()[1:] for line in done.stdout.strip().split("\n")}


# the last counter's delay loop in the swap-read and long-delay kernels: atomics that change a word
DELAY_BUMP = '            tl.atomic_add(cnt_ptr + 2, 1, sem="relaxed")\n'
POLL = '            tl.atomic_add(cnt_ptr + 2, 0, sem="relaxed")\n'


def sleeping_readers() -> dict[str, str]:
    """Red-team pass 24's readers whose delay is 64 relaxed atomic_adds of 0 to a word nobody writes
    (fire-and-forget on a GPU; a spin to the judge, the reader slept while a held writer went on):
    the swap-read's, the late count's (the long delay's kernel counting after 40 atomics of nothing,
    past any park), and the swap-read's with the polls' results used (folded into nothing)."""
    swap = (ATTACKS / "reduce_interleave_swap_read.py").read_text()
    late = (ATTACKS / "reduce_interleave_long_delay.py").read_text().replace('"DELAY": 2000', '"DELAY": 64')
    count = "    c = tl.atomic_add(cnt_ptr, 1)\n"
    assert swap.count(DELAY_BUMP) == late.count(DELAY_BUMP) == late.count(count) == 1
    late = late.replace(count, '    for _ in range(40):\n        tl.atomic_add(cnt_ptr + 2, 1, sem="relaxed")\n' + count)
    used = '            s = s + (tl.atomic_add(cnt_ptr + 2, 0, sem="relaxed") * 0).to(tl.float32)\n'
    return {"sleeping_reader": swap.replace(DELAY_BUMP, POLL), "late_count_sleeping_reader": late.replace(DELAY_BUMP, POLL),
            "sleeping_reader_used": swap.replace(DELAY_BUMP, used)}


def fresh_sources(copies: int) -> str:
    """Red-team pass 24's fresh source: the swap-read kernel written out ``copies`` times under
    other names, ``kernel_fn`` launching the next copy at each call (every launch the first of its
    source), the reader's delay 600 atomics."""
    src = (ATTACKS / "reduce_interleave_swap_read.py").read_text().replace('"DELAY": 64', '"DELAY": 600')
    head, rest = src.split("@triton.jit\n", 1)
    body, tail = rest.split("\n\n\ndef kernel_fn", 1)
    kernels = "\n\n".join("@triton.jit\n" + body.replace("def _split_sum(", f"def _split_sum_{i}(")
                           for i in range(copies))
    table = "_KERNELS = [" + ", ".join(f"_split_sum_{i}" for i in range(copies)) + "]\n_NEXT = [0]\n"
    tail = ("def kernel_fn" + tail).replace("_split_sum[(M, split)]", "_KERNELS[_NEXT[0] % len(_KERNELS)][(M, split)]")
    tail = tail.replace("    M, N = x.shape\n", "    M, N = x.shape\n    _NEXT[0] += 1\n", 1)
    return head + kernels + "\n\n\n" + table + "\n\n" + tail


def caught(outcomes, name) -> int:
    assert set(outcomes[name]) <= {"right", "wrong", "RaceError"}, outcomes[name]
    return sum(o in ("wrong", "RaceError") for o in outcomes[name])


def assert_caught(outcomes, name) -> None:
    """The kernel was caught on at least its test's ``CATCHES`` launches."""
    assert caught(outcomes, name) >= CATCHES[name], outcomes[name]


@pytest.mark.parametrize("name", ["toggle", "high_bits", "second_counter", "ticket_queue"])
def test_a_handoff_right_only_one_program_after_another_is_caught(outcomes, name):
    """Before: right on every launch (the last program by the first bump ran after every writer had
    finished; the first program took every ticket).  Turns are drawn at random, so a launch may
    still order a handoff by luck: over 100 launches each the toggle was caught 92 times, the
    high-bit finishes 62, the second counter 65, the ticket queue 91 (a judge's evaluation makes
    dozens of launches).  With programs also held (pass 19): 88, 83, 78 and 82."""
    assert_caught(outcomes, name)


def test_a_first_atomic_is_no_barrier(outcomes):
    """Red-team pass 17: every program ran to its first atomic, one after another, before any took a
    turn, so each writer had stored and released before any reader's second atomic (an unchecked
    acquire).  Programs start at turns of their own now.  Before: right on 20 of 20 launches; now
    caught on 98 of 100."""
    assert_caught(outcomes, "first_atomic_barrier")


def test_a_spin_that_gives_up_is_no_barrier(outcomes):
    """Red-team pass 17: two polls of a word nobody writes put the reader to sleep until every other
    program had finished.  Sleepers now also wake at random.  Before: right on 20 of 20 launches;
    now caught on 27 of 100 (and `bench` rejects it at smoke)."""
    assert_caught(outcomes, "sleep_barrier")


def test_a_reader_that_delays_its_acquire_is_caught(outcomes):
    """Red-team pass 17: 32 atomics of nothing before the reader's unchecked acquire put it after
    every writer when every turn was drawn evenly (0 of 20 caught, all six stages passed).  Half
    the launches now give turns by random priority with change points.  Caught on 22 of 100
    (`bench` rejects it at determinism)."""
    assert_caught(outcomes, "delay")


def test_a_reader_that_delays_its_acquire_past_any_writer_is_caught(outcomes):
    """Red-team pass 18: 2000 atomics of nothing before the reader's unchecked acquire passed all six
    stages (every writer finished first in both halves of the scheduler).  Half the launches now
    park one program after one of its first three turns until all others have ended or sleep:
    caught on 10 of 100 launches at 4x300, 10 of 40 at 16x256; 49 of 100 since pass 19's holds
    (after a store, before a site), and the park's turn drawn from 1 to 32."""
    assert_caught(outcomes, "long_delay")


def test_a_reader_that_delays_past_a_late_count_is_caught(outcomes):
    """Red-team pass 19: the long delay with four atomics of nothing before each program's count
    put the count, and the store after it, past the three turns a program could be parked after:
    right on 100 of 100 launches, all six stages passed.  One program is now held, however many
    atomics came before, until all others have ended or sleep: right after one of its stores
    (caught on 13 of 100 launches with that alone), or, where an earlier launch showed the
    kernel's sites whose writes another program read (the partial's store, the second counter's
    bump), right before one of those: 44 and 50 of 100 (two runs).  Eight of 40 asks more than the store hold
    alone gives (5 expected)."""
    assert_caught(outcomes, "late_count")


def test_a_partial_written_by_an_atomic_exchange_is_held_before_it(outcomes):
    """The late count with its partials written by a releasing ``atomic_xchg`` and read by
    acquiring atomics of zero: no store to hold after, and the count is the writer's fifth atomic
    (wrong on 3 of 100 launches).  The reader's atomics change nothing, so they are reads of data:
    the exchange's site is learned, and a writer held right before it leaves the reader a partial
    not yet written.  Wrong on 18 and 28 of 100 launches (two runs); none of 40 before the holds."""
    assert_caught(outcomes, "late_count_atomic_partials")


def test_a_diluted_late_count_is_caught_at_the_site_of_its_store(outcomes):
    """Red-team pass 20: the late count after 16 stores to the program's own slot and 40 atomics of
    nothing, so that the store held after (at most the 16th) and the turn parked after (at most the
    32nd) both came before the count: right on 100 of 100 launches against the hold after a store
    alone.  The partial's store is a site another program read: held before it, caught on 16 of 60
    and 21 of 100 launches."""
    assert_caught(outcomes, "late_count_diluted")


def test_the_hold_aims_at_the_call_whose_write_was_read(outcomes):
    """Red-team pass 21: the partial stored on the 64th call of one store site, the count (after 40
    atomics of nothing) just before that call.  Held before a call drawn from 1 to 64 at that
    site, the writer was held before its partial on 2 launches in 60 (0 of 60 in this session's
    run).  A site learns which call's write was read, and most holds there aim at it: 7 and 13 of
    60 (two runs)."""
    assert_caught(outcomes, "late_count_one_site")


def test_what_is_learned_holds_for_a_kernel_jitted_afresh(outcomes):
    """Red-team pass 22 (mine): the one-site late count jitted at every call of kernel_fn from a
    fresh copy of its function.  The interpreter rewrites each function object once, so each
    launch ran a kernel of its own, its sites numbered anew, and nothing was ever learned: right
    on 40 of 40 launches (with this session's aimed holds but a key per rewrite).  A kernel is
    known by its source now, and its sites by their place in it: 14 of 40."""
    assert_caught(outcomes, "late_count_one_site_fresh_jit")


def test_the_hold_aims_at_the_program_whose_write_was_read(outcomes):
    """Red-team pass 22 (mine): one fixed program sets a flag, then stores the scale the others
    read, then releases the flag again; the others wait, delay, and acquire it unchecked.  A
    program held at random is that leader on one launch in twelve, and each waiting program's
    ``atomic_add(flag, 0)`` was learned as one more write to hold before: right on 40 of 40
    launches.  A site learns which program's write was read and holds it, and an atomic that
    changed nothing is no write to learn: 12 of 40."""
    assert_caught(outcomes, "leader_publishes_early")


def test_a_read_by_an_atomic_that_changes_the_value_is_learned(outcomes):
    """Red-team pass 23: the reader swaps every partial out with an acquiring ``atomic_xchg``
    (changing it), after its unchecked acquire, and the writers exchange their partials in after
    a long computation.  Only plain loads and atomics that changed nothing were learned as reads,
    so nothing was learned and no hold was aimed: right on 60 of 60 launches (0 of 60 at 2f147eb),
    all six stages passed.  An atomic whose result is used reads data whatever it writes (one
    whose call is a statement of its own compiles to a reduction that reads nothing): 20 of 60."""
    assert_caught(outcomes, "swap_read")


@pytest.mark.parametrize("name", ["sleeping_reader", "late_count_sleeping_reader", "sleeping_reader_used"])
def test_a_reader_whose_delay_sleeps_does_not_end_a_hold(outcomes, name):
    """Red-team pass 24: the swap-read's and the late count's reader delayed with relaxed atomics
    of 0 to a word nobody writes.  The judge took those polls for a spin: the reader slept, and a
    held writer went on as soon as every other program had ended or slept, the reader waking only
    at random: right on 200 of 200 launches each, every bench run passed.  An atomic whose result
    is not used is no read a program could wait on (its polls are no spin), and before a held or
    parked program goes on, the sleepers are woken, up to HELD_WAKES times, where none is awake:
    a delay of polls whose results are used runs on, a wait on the held program sleeps again."""
    assert_caught(outcomes, name)


def test_the_first_launch_of_a_source_is_learned_before_it_runs(outcomes):
    """Red-team pass 24: the swap-read kernel written out under 260 names, a new one each launch:
    every launch was the first of its source, nothing was learned when it ran, and no hold was
    aimed (right on 100 of 100 launches, three bench runs passed).  A launch of a source the worker
    has not run is now run once to learn its sites, its tensors restored, and run again."""
    assert_caught(outcomes, "fresh_source")


def test_a_spin_of_two_polls_sleeps(outcomes):
    """Red-team pass 20: a look-back whose wait reads its predecessor's flag and a launch-wide abort
    word (two atomics a poll) alternated between two turns that each read something else, so it
    never slept: a parked or held program waited for ever (6 of 20 launches timed out after 60 s).
    A cycle of up to 8 turns that read the same, writing nothing, is a spin now (0.06 s a launch)."""
    assert outcomes["lookback_two_polls"] == ["right"] * 24


def test_a_jit_function_whose_source_cannot_be_read_is_refused(outcomes):
    """Red-team pass 20 (found while fixing its report): the interpreter runs a jit function whose
    source ``inspect`` cannot read as it is, unrewritten, so its programs ran one after another
    again; the ticket queue with its file's lines emptied in ``linecache`` passed all six stages
    of `bench`.  Refused now."""
    assert outcomes["ticket_queue_no_source"] == ["NotCompiledError"] * 24, outcomes["ticket_queue_no_source"]


def test_the_interpreter_runs_the_body_a_gpu_compiles(outcomes):
    """Red-team pass 21: a string in a jit body holding a second ``def`` line of the function: the
    interpreter's rewrite took the last such line and ran the string's text (an honest row sum),
    a GPU compiles the real body (the first 128 columns only): all six stages passed.  Wrong on
    every launch now, as on a GPU."""
    assert outcomes["def_in_string"] == ["wrong"] * 8, outcomes["def_in_string"]


def test_a_parked_program_is_not_kept_out_by_a_spin_that_writes(outcomes):
    """Red-team pass 21: a look-back whose spin counts its polls (a relaxed add each poll) never
    slept, and a program parked or held waited for others that neither end nor sleep: 11 of 20
    launches ran past 20 s.  A parked program runs again after 20000 turns of the others."""
    assert outcomes["lookback_heartbeat"] == ["right"] * LAUNCHES["lookback_heartbeat"], outcomes["lookback_heartbeat"]


def test_a_load_learns_its_site_whatever_orders_it():
    """Red-team pass 21: once two programs had stored the same bits somewhere in a launch, no plain
    load learned the site it read (the learning sat in the branch the same-bits rule took), so a
    kernel storing one word twice had nothing learned on any launch: the diluted late count was
    caught on 0 of 60 launches."""
    import numpy as np

    from autokernel.harness.interpreter_as_gpu import LaunchMemory

    memory = LaunchMemory()
    memory.tracking = True
    memory.program, memory.site, memory.call = 1, 5, 2
    memory.stored(np.arange(100, 104))
    memory.stored(np.arange(200, 204))
    memory.program, memory.site = 2, 6
    memory.stored(np.arange(200, 204), kept=lambda overwritten: overwritten)  # the same bits again
    assert memory.same_bits
    memory.program = 3
    memory.atomic(np.array([], dtype=np.int64), np.arange(100, 104))  # acquires nothing of 1's
    try:
        memory.loaded(np.arange(100, 104))
    except Exception as exc:  # unordered: a race, and the site is learned before it is raised
        assert "RaceError" in type(exc).__name__
    assert memory.read_calls == {(5, 2, 1)}


def test_a_spin_that_reloads_between_polls_sleeps(outcomes):
    """Red-team pass 18: a look-back whose spin re-loads its chunk never slept (1.75 s a launch at
    8x2048 now; 8.9 s before; 0.38 s one program after another)."""
    assert outcomes["lookback_busy_spin"] == ["right"] * 8


def test_a_grid_barrier_of_a_cooperative_launch_is_no_deadlock(outcomes):
    """Red-team pass 19: a grid barrier in a launch with ``launch_cooperative_grid=True`` (CUDA runs
    every program at once) was a ``DeadlockError`` on 9 of 40 launches (few programs resident)."""
    assert outcomes["cooperative_barrier"] == ["right"] * 24


def test_a_work_queue_counter_in_a_tuple_is_put_back_for_the_judged_run(outcomes):
    """Red-team pass 25: the replay of a source's first launch put back only top-level tensor
    arguments; a work queue's counter passed in a tuple was at its end for the judged run, which
    then computed nothing (an honest kernel failed at smoke)."""
    assert outcomes["work_queue_tuple"] == ["right"] * 8


def test_a_program_waiting_on_later_programs_hangs_only_where_a_gpu_would(outcomes):
    """A row's first chunk spinning until the later chunks have counted: before, the launch hung
    whenever that chunk ran first (one program to its end).  On an H100 it is right at 4 and 256
    rows and hangs at 4096, where the waiting programs fill the GPU.  On a quarter of the launches
    the judge now runs only a few programs at once, started in the grid's order: where all of
    those wait on programs not started, a ``DeadlockError`` (10 launches in 100 here)."""
    seen = outcomes["first_waits_for_all"]
    assert set(seen) == set(OUTCOMES_SEEN["first_waits_for_all"]), seen


def test_a_wait_by_atomic_poll_passes(outcomes):
    """Triton's interpreter spins inside ``tl.atomic_poll`` (no other program can run) and fails once
    a poll is unmet; the judge's polls once a turn.  Right on every launch (failed on every one
    before, once programs were interleaved)."""
    if not hasattr(tl, "atomic_poll"):
        pytest.skip("this Triton has no tl.atomic_poll")
    assert outcomes["lookback_atomic_poll"] == ["right"] * LAUNCHES["lookback_atomic_poll"]


def test_a_loop_of_atomics_that_change_nothing_is_no_deadlock(outcomes):
    """Such a loop sleeps every second turn, as a spin does, and is woken when all sleep; a deadlock
    is 1000 such wakes in a row with no write between (20 failed this kernel)."""
    assert outcomes["idles_after_counting"] == ["right"] * 4


def test_programs_that_all_wait_on_a_value_none_changes_deadlock(outcomes):
    """Before: the launch spun for ever (the judge's timeout)."""
    assert outcomes["waits_for_nobody"] == ["DeadlockError"] * 4


def test_the_ticket_queue_fails_the_judge():
    """The full judge (a worker, the watch, the code rule): before, all six stages passed.  It is
    wrong on 91 launches in 100, so mostly at smoke, now and then at a later stage."""
    from autokernel.harness.evaluate import Evaluator

    with Evaluator("reduce", device="cpu", timeout_s=JUDGE_STAGE_S, timing=False, baselines=False) as ev:
        result = ev.evaluate(ATTACKS / "reduce_interleave_ticket_queue.py")
    assert result.verdict == "incorrect", result.message


def test_honest_atomic_kernels_still_pass_the_judge():
    """The look-back chain (each chunk waits on the one before) and a relaxed atomic_add of partials
    into the output, through every stage with programs interleaved."""
    from autokernel.harness.evaluate import Evaluator

    with Evaluator("reduce", device="cpu", timeout_s=JUDGE_STAGE_S, timing=False, baselines=False, dtypes=["fp32"]) as ev:
        result = ev.evaluate(ATTACKS / "honest_reduce_pass13_lookback_ticket.py")
    assert result.verdict == "pass", result.message


@pytest.mark.parametrize("body", [
    "    y = [tl.load(x_ptr) for _ in range(2)]\n",
    "    f = lambda v: tl.atomic_add(x_ptr, v)\n",
    "    def inner():\n        return tl.load(x_ptr)\n",
    "    __autokernel_call__ = print\n",
])
def test_what_triton_does_not_compile_is_refused_in_a_jit_body(body):
    """A lambda or comprehension is no place to suspend a program at (``yield`` is not allowed in
    either), and Triton compiles neither, nor a nested function; the judge's own names are its own."""
    from autokernel.harness.interpreter_interleave import NotCompiledError, generator_variant

    fn = ast.parse(f"def k(x_ptr):\n{body}").body[0]
    with pytest.raises(NotCompiledError):
        generator_variant(fn)


def test_every_call_of_a_jit_body_goes_through_the_judge():
    from autokernel.harness.interpreter_interleave import CALL, generator_variant

    fn = ast.parse("def k(x_ptr, n):\n    v = tl.load(x_ptr + tl.arange(0, 4)).to(tl.float32)\n"
                   "    while tl.atomic_add(x_ptr, 0) < n:\n        pass\n    return v\n").body[0]
    variant = generator_variant(fn).body[0]
    calls = [n for n in ast.walk(variant) if isinstance(n, ast.Call)]
    assert len(calls) == 4 and all(isinstance(c.func, ast.Name) and c.func.id == CALL for c in calls)


def test_sites_are_learned_per_kernel_and_old_kernels_forgotten():
    """A launch's sites whose writes another program read are kept for the kernel's next launches,
    with the calls there whose writes were read and the most calls one program made there; a
    worker that loads file after file keeps the latest ``LEARNED_KERNELS`` kernels only."""
    import numpy as np

    from autokernel.harness.interpreter_as_gpu import LEARNED_KERNELS, LaunchMemory, ReadSite

    memory = LaunchMemory()
    memory.program = 3
    assert [memory.reached(7) for _ in range(3)] == [1, 2, 3]
    memory.program = 4
    assert memory.reached(7) == 1 and memory.reached(9) == 1 and memory.reached(11) == 1
    rng = np.random.default_rng(0)
    memory.read_calls = {(7, 3, 3), (7, 1, 4), (9, 1, 4)}
    memory.learn_sites("first", rng)
    assert memory.sites_read["first"] == {7: ReadSite(3, {(1, 4), (3, 3)}), 9: ReadSite(1, {(1, 4)})}
    assert memory.calls == {} and memory.read_calls == set()
    memory.read_calls = {(7, 2, 5)}
    memory.learn_sites("first", rng)
    assert memory.sites_read["first"] == {7: ReadSite(3, {(1, 4), (2, 5), (3, 3)}), 9: ReadSite(1, {(1, 4)})}
    for kernel in range(LEARNED_KERNELS + 5):
        memory.read_calls = {(kernel, 1, 0)}
        memory.learn_sites(kernel, rng)
    assert len(memory.sites_read) == LEARNED_KERNELS and "first" not in memory.sites_read
    assert memory.sites_read[LEARNED_KERNELS + 4] == {LEARNED_KERNELS + 4: ReadSite(0, {(1, 0)})}


def test_a_site_keeps_a_sample_of_every_call_read_not_the_first_ones():
    """Red-team pass 23: 63 decoy calls at the partial's store site, read by the last arriver, filled
    the ``READ_CALLS`` pairs a site keeps with the lowest calls, so the partial's 64th call was never
    learned (0 of 60 launches, all six stages passed).  A site keeps a uniform sample of the pairs
    it was offered."""
    import numpy as np

    from autokernel.harness.interpreter_as_gpu import READ_CALLS, LaunchMemory

    memory, rng = LaunchMemory(), np.random.default_rng(1)
    for launch in range(4):
        memory.read_calls = {(5, call, writer) for call in range(1, 65) for writer in range(12)}
        memory.learn_sites("k", rng)
    kept = memory.sites_read["k"][5].reads
    assert len(kept) == READ_CALLS
    assert any(call == 64 for call, _ in kept) and max(call for call, _ in kept) > 40


def test_kernels_that_learn_nothing_do_not_push_out_one_that_did():
    """Red-team pass 23: a kernel_fn that launched 64 tiny kernels after the real one made the worker
    forget what the real one had taught it, at every launch (0 of 60 caught, all six stages
    passed).  A kernel whose launch showed no read of another program's write takes no place."""
    import numpy as np

    from autokernel.harness.interpreter_as_gpu import LEARNED_KERNELS, LaunchMemory

    memory, rng = LaunchMemory(), np.random.default_rng(2)
    memory.read_calls = {(3, 1, 0)}
    memory.learn_sites("real", rng)
    for kernel in range(2 * LEARNED_KERNELS):
        memory.learn_sites(kernel, rng)
    assert "real" in memory.sites_read and len(memory.sites_read) == 1
