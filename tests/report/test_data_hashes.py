"""bench.report pools runs of one data set only when they read the same data (provenance.data_files)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.collect import from_directories
from bench.errors import BenchError
from bench.records import write_json
from bench.report import make_report
from bench.report.__main__ import main as report_main

GOOD = "4ab66c074eb9b253368b5a488974ac89a1fc59adbf0aa3e59bece5cefcd87028"
OTHER = "0123456789abcdef" * 4
ZIP = "ir-benchmark/movielens-100k/proc.zip"


def _run(root: Path, name: str, seed: int, ndcg: float, data_files: dict[str, str] | None,
         dataset: str = "ml100k") -> Path:
    d = root / name
    d.mkdir(parents=True)
    payload = {"status": "completed", "overrides": [f"seed={seed}"], "test": {"ndcg@20": ndcg},
               "config": {"seed": seed, "task": {"name": "cf"}, "dataset": {"name": dataset}, "model": {"name": "mf"},
                          "loss": {"name": "sl"}}}
    if data_files is not None:
        payload["provenance"] = {"code": {"commit": "abc", "dirty": False}, "data_files": data_files}
    write_json(d / "results.json", payload)
    return d


def test_runs_that_read_different_data_are_refused_in_one_line(tmp_path, capsys):
    a = _run(tmp_path, "a", 0, 0.30, {ZIP: GOOD})
    b = _run(tmp_path, "b", 1, 0.32, {ZIP: OTHER})
    assert report_main([str(tmp_path), "--no-plots", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: data set 'ml100k' was read from different files: ")
    assert f"{ZIP} (sha256 {GOOD[:12]}) in {a}, {ZIP} (sha256 {OTHER[:12]}) in {b}" in err
    assert "rerun them on the same data, or report them separately" in err
    assert not (tmp_path / "out").exists()


def test_a_missing_file_is_a_difference_too(tmp_path):
    a = _run(tmp_path, "a", 0, 0.30, {"planetoid/ind.cora.x": GOOD, "planetoid/ind.cora.y": OTHER})
    b = _run(tmp_path, "b", 1, 0.32, {"planetoid/ind.cora.x": GOOD})
    records, _ = from_directories([tmp_path])
    expected = f"planetoid/ind.cora.y (sha256 {OTHER[:12]}) in {a}, no such file in {b};"
    with pytest.raises(BenchError, match=re.escape(expected)):
        make_report(records, ["ndcg@20"])


def test_runs_on_the_same_data_pool_whatever_the_file_was_called(tmp_path):
    _run(tmp_path, "a", 0, 0.30, {ZIP: GOOD})
    _run(tmp_path, "b", 1, 0.32, {"proc.zip": GOOD})  # the same bytes found elsewhere
    _run(tmp_path, "c", 0, 0.20, {ZIP: OTHER}, dataset="health")  # another data set: no comparison
    records, _ = from_directories([tmp_path])
    rep = make_report(records, ["ndcg@20"])
    row = rep.table[rep.table["dataset"] == "ml100k"].iloc[0]
    assert row["n"] == 2 and row["mean"] == pytest.approx(0.31)
    assert not any("no data hashes" in n for n in rep.notes)


def test_runs_without_provenance_are_pooled_with_a_note(tmp_path):
    _run(tmp_path, "old", 0, 0.30, None)
    _run(tmp_path, "new", 1, 0.32, {ZIP: GOOD})
    records, _ = from_directories([tmp_path])
    rep = make_report(records, ["ndcg@20"])
    assert rep.table.iloc[0]["n"] == 2
    assert any(n.startswith("1 run(s) record no data hashes") for n in rep.notes)
