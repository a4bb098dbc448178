"""Every starter's Triton kernels, on the path its host code takes on a GPU, compile for Hopper
(sm90) and fit a block's shared memory: what the interpreter cannot show (tests/sm90_compile.py
records the launches of ``kernel_fn`` on meta tensors and compiles each with Triton's CUDA
backend; no GPU is needed, Triton's own ptxas is)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.problems.registry import list_kinds

SCRIPT = Path(__file__).resolve().parent / "sm90_compile.py"


def _cuda_backend() -> str | None:
    """Why Triton here cannot compile for CUDA, or None."""
    try:
        import triton
        from triton.backends.nvidia import compiler  # noqa: F401
    except ImportError as exc:
        return f"Triton's CUDA backend is missing: {exc}"
    ptxas = Path(os.environ.get("TRITON_PTXAS_PATH") or Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas")
    return None if ptxas.is_file() else f"no ptxas at {ptxas}"


pytestmark = pytest.mark.skipif(_cuda_backend() is not None, reason=str(_cuda_backend()))


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SCRIPT.parent.parent / "src"), env.get("PYTHONPATH")) if p)
    return env


def compile_rows(*args: str) -> list[dict]:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], env=_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def compile_rows_sharded(mode: str, shards: int = 2) -> list[dict]:
    """``mode`` (``--all``) in ``shards`` processes side by side: compiling is the whole cost, one core each."""
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), mode, "--shard", f"{i}/{shards}"], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(shards)]
    rows = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return rows


def test_every_starter_compiles_for_hopper_at_its_first_gpu_shape():
    rows = compile_rows_sharded("--all")
    errors = [r for r in rows if "error" in r]
    assert errors == []
    assert {r["kind"] for r in rows} == set(list_kinds())
    too_big = [(r["kind"], r["kernel"], r["shared"]) for r in rows if not r["fits"]]
    assert too_big == []


def test_moe_experts_compiles_in_fp32_at_a_decode_shape():
    """fp32 takes IEEE dots and 16 tokens small row tiles: another compile than bf16 at 4096."""
    rows = compile_rows("moe_experts", "fp32", "T=16", "K=2", "E=8", "D=4096", "I=14336")
    assert [r["kernel"] for r in rows] == ["_count_kernel", "_place_kernel", "_gate_up_kernel", "_down_kernel",
                                           "_combine_kernel"]
    assert all(r["fits"] for r in rows)
    assert rows[2]["constexprs"]["IEEE"] is True and rows[2]["constexprs"]["BLOCK_M"] == 32
