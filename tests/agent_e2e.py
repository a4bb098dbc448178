"""Helpers for the end-to-end agent tests: a real (tiny) run of ``run_optimize`` on the
``reduce`` problem under the Triton interpreter, starting from a kernel of our own."""
from __future__ import annotations

import subprocess
from pathlib import Path

from agent_stubs import KERNEL

# A correct row-sum kernel for the reduce problem whose start setting loops over each row in
# chunks of 64 (about twice as slow under the interpreter: far past the judge's noise, and each
# evaluation of it costs a third of what chunks of 16 did); FAST does one chunk per row; BROKEN
# pads masked lanes with 1.0 (wrong sums whenever N is not a multiple of the block).
START = (KERNEL.replace('"BLOCK_N": 256', '"BLOCK_N": 64')
         .replace("    out = torch.empty((M,), dtype=x.dtype, device=x.device)\n",
                  "    out = torch.empty((M,), dtype=x.dtype, device=x.device)\n    if M == 0:\n        return out\n"))
FAST = START.replace('"BLOCK_N": 64', '"BLOCK_N": 512')
BROKEN = FAST.replace("other=0.0", "other=1.0")
FAST_WARPS = FAST.replace('"num_warps": 4}', '"num_warps": 8}')
assert START != KERNEL and FAST != START and BROKEN != FAST and FAST_WARPS != FAST


def start_file(tmp_path: Path) -> Path:
    path = tmp_path / "start_kernel.py"
    path.write_text(START)
    return path


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def grep_everywhere(root: Path, needle: str) -> str:
    """Files under ``root`` (work tree, logs, .git objects unpacked by log -p) holding ``needle``."""
    hits = subprocess.run(["grep", "-rl", "--", needle, str(root)], capture_output=True, text=True).stdout
    history = git(root, "log", "--all", "-p", "--format=%H %s%n%b")
    return hits + ("git history\n" if needle in history else "")
