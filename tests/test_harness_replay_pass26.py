"""Red-team pass 26 on pass 24's replay (a launch run once to learn, its tensors put back, run
again with the holds aimed), each test failing before its fix: the replay ran on a source's first
launch only, and the two runs could be told apart by the kernel.

* A first launch of no program (a 'warm-up' of each fresh source) used the replay up: nothing
  was learned there, and the real launch, no longer the first, ran once with nothing learned
  (0 of 30 launches caught, all six stages passed).  Any launch of a kernel that has learned
  nothing and ran an atomic is replayed now.
* A grid callable is called at each run: one that gave the learning run no program learned
  nothing, and the judged run raced unaimed (0 of 30, all six stages passed).  It is taken once.
* A counter kept in memory no argument holds (an address made from an integer) is not put back:
  the judged run saw the learning run's bumps.  Such a write is refused (``ForeignWriteError``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_harness_interleaved import PROBE, caught, fresh_sources

WARMUP_LAUNCHES = 16


def warmup_sources(copies: int) -> str:
    """The fresh-source swap-read race, each source launched with no program before its launch."""
    src = fresh_sources(copies)
    launch = "    _KERNELS[_NEXT[0] % len(_KERNELS)][(M, split)]("
    assert src.count(launch) == 1
    return src.replace(launch, "    for rows in (0, M):  # no program first, then the launch\n"
                               "        _KERNELS[_NEXT[0] % len(_KERNELS)][(rows, split)](")


def probe(folder: Path, *launches: str) -> dict[str, list[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, str(folder), *launches], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.split()[0]: line.split()[1:] for line in done.stdout.strip().split("\n")}


def test_a_warm_up_launch_does_not_use_the_replay_up(tmp_path):
    (tmp_path / "warmup.py").write_text(warmup_sources(WARMUP_LAUNCHES))
    # name:launches:catches:outcomes (test_harness_interleaved.PROBE): the launches stop at the first
    # catch, which is all the verdict asks (the rest could not change it)
    outcomes = probe(tmp_path, f"warmup:{WARMUP_LAUNCHES}:1:")
    assert caught(outcomes, "warmup") >= 1, outcomes["warmup"]


SCRIPT = '''
import torch, triton, triton.language as tl
from autokernel.harness import interpreter_as_gpu
interpreter_as_gpu.install()

@triton.jit
def bump(cnt_ptr, off, out_ptr):
    c = tl.atomic_add(cnt_ptr + off, 1)
    tl.store(out_ptr + tl.program_id(0), c)

@triton.jit
def bump_elsewhere(cnt_ptr, off, out_ptr):
    c = tl.atomic_add(cnt_ptr + off, 1)
    tl.store(out_ptr + tl.program_id(0), c + 1)

calls = []
def grid(meta):
    calls.append(1)
    return (2,)

cnt, out = torch.zeros(4, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
bump[grid](cnt, 0, out)
print("grid calls", len(calls), "count", int(cnt[0]))
hidden = torch.zeros(4, dtype=torch.int32)
try:
    bump_elsewhere[(2,)](cnt, (hidden.data_ptr() - cnt.data_ptr()) // 4, out)
    print("hidden", int(hidden[0]))
except Exception as exc:
    print("hidden", type(exc).__name__)
'''


def test_the_runs_of_a_replayed_launch_are_one_launch_to_the_kernel(tmp_path):
    script = tmp_path / "replayed.py"  # a file: the interleaving needs the jit function's source
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TRITON_INTERPRET="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().split("\n")
    assert lines[0] == "grid calls 1 count 2", lines  # before: the grid called twice (the count was put back)
    assert lines[1] == "hidden ForeignWriteError", lines  # before: 4 (bumped by both runs)
