"""results.tsv records: round trip, atomic append, partial-line repair."""
from autokernel.loop.results import (COLUMNS, HEADER, ExperimentRecord, append_result, read_results,
                                     repair_results)


def record(n, status="keep", **kw):
    return ExperimentRecord(experiment=n, problem="softmax", agent="tuner", status=status, latency_us=12.5,
                            throughput=800.0, throughput_unit="GB/s", pct_roofline=61.2, speedup_vs_eager=1.3,
                            speedup_vs_start=1.1, wall_s=3.2, tokens=0, commit="abc1234",
                            description="num_warps 4→8", **kw)


def test_columns_in_order(tmp_path):
    path = tmp_path / "results.tsv"
    append_result(path, record(1))
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == list(COLUMNS)
    assert COLUMNS[:4] == ("experiment", "problem", "agent", "status") and COLUMNS[-1] == "description"
    assert lines[1].split("\t")[COLUMNS.index("status")] == "keep"


def test_round_trip_and_filter(tmp_path):
    path = tmp_path / "results.tsv"
    rows = [record(0, "baseline"), record(1), ExperimentRecord(2, "reduce", "llm", "incorrect", failed_stage="edges",
                                                               description="tab\there\nnewline", tokens=1234)]
    for r in rows:
        append_result(path, r)
    back = read_results(path)
    assert back[:2] == rows[:2]
    assert back[2].latency_us is None and back[2].failed_stage == "edges" and back[2].tokens == 1234
    assert back[2].description == "tab here newline"
    assert [r.experiment for r in read_results(path, "reduce")] == [2]
    assert back[0].correct and back[1].correct and not back[2].correct


def test_partial_line_is_dropped(tmp_path):
    path = tmp_path / "results.tsv"
    append_result(path, record(1))
    with open(path, "a") as fh:
        fh.write("2\tsoftmax\ttuner\tke")  # a row cut off by kill -9
    assert len(read_results(path)) == 1  # readers never see it
    assert repair_results(path)
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 2
    assert not repair_results(path)
    append_result(path, record(2))
    assert [r.experiment for r in read_results(path)] == [1, 2]


def test_rejects_unknown_status(tmp_path):
    import pytest

    with pytest.raises(ValueError):
        append_result(tmp_path / "r.tsv", record(1, status="maybe"))
    assert not (tmp_path / "r.tsv").exists() or (tmp_path / "r.tsv").read_text() == HEADER
