"""The arithmetic of the benchmark scripts whose numbers BENCHMARKS.md publishes."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def _results(folder: Path, rows: list[tuple[str, float]]) -> None:
    folder.mkdir(parents=True)
    lines = ["experiment\tstatus\twall_s"] + [f"{i}\t{status}\t{wall}" for i, (status, wall) in enumerate(rows)]
    (folder / "results.tsv").write_text("\n".join(lines) + "\n")


def test_loop_cost_leaves_the_cold_first_evaluation_out(tmp_path, capsys):
    table = _load("loop_cost_table")
    _results(tmp_path / "old" / "loop_rmsnorm", [("baseline", 30.0), ("revert", 2.0), ("revert", 2.0), ("keep", 2.0)])
    _results(tmp_path / "new" / "loop_rmsnorm", [("baseline", 40.0), ("revert", 1.0), ("revert", 3.0)])
    old = table.summary(table.rows_of(tmp_path / "old", "rmsnorm"))
    assert old["n"] == 3 and old["median"] == 2.0 and old["per_hour"] == pytest.approx(1800.0)
    assert old["statuses"] == "revert 2, keep 1"
    sys.argv = ["loop_cost_table.py", str(tmp_path / "old"), str(tmp_path / "new")]
    assert table.main() == 0
    out = capsys.readouterr().out
    assert "| rmsnorm | new | 2 | revert 2 | 2.00 / 2.00 | 1800 | 1.00x |" in out


def test_kernel_classes_of_a_model_profile():
    profile = _load("model_profile_gpu")
    assert profile.kernel_class("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT") == "GEMM"
    assert profile.kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64") == "GEMM"
    assert profile.kernel_class("triton_tem_fused_mm_0") == "GEMM"
    assert profile.kernel_class("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>") == "attention"
    assert profile.kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "attention"
    assert profile.kernel_class("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0") == "other"
    assert profile.kernel_class("_add_rmsnorm_kernel") == "other"
