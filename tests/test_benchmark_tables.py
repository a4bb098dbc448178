"""The arithmetic of the benchmark scripts whose numbers BENCHMARKS.md publishes."""
from __future__ import annotations

import gc
import importlib.util
import sys
import warnings
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


def _closing_files(fn):
    """``fn()``, failing on a file it left open (the scripts once left results.tsv to the collector)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = fn()
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
    return value


def _results(folder: Path, rows: list[tuple[str, float]]) -> None:
    folder.mkdir(parents=True)
    lines = ["experiment\tstatus\twall_s"] + [f"{i}\t{status}\t{wall}" for i, (status, wall) in enumerate(rows)]
    (folder / "results.tsv").write_text("\n".join(lines) + "\n")


def test_loop_cost_leaves_the_cold_first_evaluation_out(tmp_path, capsys):
    table = _load("loop_cost_table")
    _results(tmp_path / "old" / "loop_rmsnorm", [("baseline", 30.0), ("revert", 2.0), ("revert", 2.0), ("keep", 2.0)])
    _results(tmp_path / "new" / "loop_rmsnorm", [("baseline", 40.0), ("revert", 1.0), ("revert", 3.0)])
    old = table.summary(_closing_files(lambda: table.rows_of(tmp_path / "old", "rmsnorm")))
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


def test_judge_replay_counts_the_agents_share_of_each_row_with_either_judge(tmp_path, capsys):
    """The loop's rate with the same agent: each row's agent time (its wall less its evaluation's)
    added to each judge's evaluation of the same proposal."""
    replay = _load("judge_replay")
    work = tmp_path / "loop_rmsnorm"
    _results(work, [("baseline", 30.0), ("revert", 12.0), ("revert", 2.0)])
    logs = work / "logs" / "rmsnorm" / "rmsnorm"
    logs.mkdir(parents=True)
    for number, evaluation_s in ((0, 29.0), (1, 2.0), (2, 1.0)):
        (logs / f"exp_{number:04d}.json").write_text(f'{{"wall_s": {evaluation_s}}}')
    agent = _closing_files(lambda: replay.agent_seconds(work / "results.tsv"))
    assert agent == {0: 1.0, 1: 10.0, 2: 1.0}
    new = {"rows": [{"experiment": 1, "verdict": "slower", "wall_s": 2.0, "phases": {"screen": 1.5}},
                    {"experiment": 2, "verdict": "slower", "wall_s": 1.0, "phases": {"screen": 0.5}}]}
    old = {"rows": [{"experiment": 1, "verdict": "pass", "wall_s": 4.0, "phases": {}},
                    {"experiment": 2, "verdict": "pass", "wall_s": 2.0, "phases": {}}]}
    replay.table([new, old], ["new", "old"], agent)
    out = capsys.readouterr().out
    # new: 2 rows in 12 + 2 s -> 514/h, median 1.5 s; old: 14 + 3 s -> 424/h, median 3.0 s
    assert "| new | 2 | slower 2 | 1.50 / 1.50 | 514 | screen 1.00 | 0.50x |" in out
    assert "| old | 2 | pass 2 | 3.00 / 3.00 | 424 |  | 1.00x |" in out


def test_moe_table_shows_a_ratio_not_measured_as_a_dash():
    """The CPU smoke has no torch.compile time: its ratio is '—', not '—x'."""
    moe = _load("moe_gpu")
    row = {"name": "tiny", "shape": {"T": 12, "K": 2, "E": 4, "D": 32, "I": 48}, "tokens_per_expert": (3, 11),
           "starter_ms": 2.0, "grouped_ms": 1.0, "loop_ms": 4.0, "starter_error": 1e-7, "grouped_error": 6e-8}
    line = moe.markdown([row]).splitlines()[-1]
    assert "| 0.50x | 2.00x | — |" in line and "—x" not in line


def test_starter_knobs_records_a_setting_that_fails_and_goes_on(tmp_path, capsys, monkeypatch):
    """benchmarks/starter_knobs_gpu.py (the sweep that chose the eighteenth session's defaults):
    every setting is checked against the reference before it is timed, one that does not run is
    a row with its error, not the end of the sweep."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    knobs = _load("starter_knobs_gpu")
    code = knobs.main(["--kind", "gelu", "--cpu-smoke", "--out", str(tmp_path), "--shape-json", '{"N": 40}',
                       "--configs", '[{}, {"BLOCK": 100}, {"BLOCK": 64}]'])
    assert code == 0
    import json

    (written,) = tmp_path.glob("knobs_gelu_*.json")  # one file per kind and shape: sweeps of two shapes both stay
    record = json.loads(written.read_text())
    assert record["shape"]["N"] == 40 and "N40" in written.name  # --shape-json set over the indexed shape
    rows = record["rows"]
    by = {r["setting"]: r for r in rows}
    assert "ms" in by["default"] and by["default"]["error"] < 1e-5
    assert "ms" in by['{"BLOCK": 64}'] and by['{"BLOCK": 64}']["knobs"]["BLOCK"] == 64
    assert "failed" in by['{"BLOCK": 100}'] and "ms" not in by['{"BLOCK": 100}']  # not a power of 2
    table = capsys.readouterr().out.split("| setting |", 1)[1]
    assert table.index('{"BLOCK": 100}') > table.index("default")  # failures listed after the timed settings
