"""The run ledger: rows keyed by seed, one setting and one data version per ledger, and errors
that name the file, the line and the fix."""

from __future__ import annotations

import math

import pytest

from bench.errors import BenchError
from bench.records import COMPLETED, RunResult
from bench.records.ledger import (
    ID_COLUMNS,
    data_digest,
    ledger_row,
    ledger_values,
    read_ledger,
    setting_of,
    update_ledger,
)


def _result(seed: int, ndcg: float, tau: str = "0.1", sha: str = "ab" * 32) -> RunResult:
    return RunResult(status=COMPLETED, config={"seed": seed},
                     overrides=["+experiment=paper/table2_mf_gowalla", "loss=sl", f"loss.tau={tau}", f"seed={seed}",
                                "logger=csv", "hydra.sweep.dir=/x", "eval.sampled_negatives=100"],
                     best={"epoch": 149, "val": {"ndcg@20": ndcg + 0.01}},
                     test={"ndcg@20": ndcg, "recall@20": 2 * ndcg},
                     epochs_trained=200, timing_s={"fit": 3600.04, "test": 5.0, "train_epoch_median": 17.234},
                     provenance={"code": {"commit": "c0ffee", "dirty": False},
                                 "data_files": {"/data/gowalla/train.txt": sha}},
                     finished_at=f"2026-12-01T10:0{seed}:00")


def test_setting_leaves_out_seed_placement_and_side_outputs():
    assert setting_of(_result(3, 0.1).overrides) == "experiment=paper/table2_mf_gowalla loss.tau=0.1 loss=sl"
    assert setting_of(["seed=1", "output_dir=/a", "trainer.devices=2"]) == ""


def test_data_digest_names_contents_not_location():
    moved = _result(0, 0.1)
    moved.provenance["data_files"] = {"/elsewhere/gowalla/train.txt": "ab" * 32}
    assert data_digest(moved) == data_digest(_result(0, 0.1)) != data_digest(_result(0, 0.1, sha="cd" * 32))
    assert len(data_digest(moved)) == 12
    assert data_digest(RunResult()) == ""


def test_row_round_trips_through_the_file(tmp_path):
    path = tmp_path / "cell" / "runs.csv"
    rows = update_ledger(path, [ledger_row(_result(1, 0.16), {"ref/ndcg@20": 0.155})])
    back = read_ledger(path)
    assert back == rows and len(back) == 1
    row = back[0]
    assert list(row)[:len(ID_COLUMNS)] == list(ID_COLUMNS)
    assert row["seed"] == 1 and row["commit"] == "c0ffee" and row["best_epoch"] == "149"
    assert row["fit_s"] == 3600.0 and row["test/ndcg@20"] == 0.16 and row["test/recall@20"] == 0.32
    assert row["ref/ndcg@20"] == 0.155
    assert row["train_epoch_s"] == 17.23  # the median training epoch, rounded to 10 ms
    assert row["device"] == ""  # not recorded


def test_device_names_the_gpu_a_run_trained_on():
    on_gpu = _result(0, 0.1)
    on_gpu.device, on_gpu.provenance["hardware"] = "cuda:0", {"cpu": "AMD EPYC", "gpu": "NVIDIA H200"}
    assert ledger_row(on_gpu)["device"] == "cuda:0 NVIDIA H200"
    on_cpu = _result(0, 0.1)
    on_cpu.device, on_cpu.provenance["hardware"] = "cpu", {"cpu": "AMD EPYC", "gpu": None}
    assert ledger_row(on_cpu)["device"] == "cpu"


def test_rows_finishing_together_are_all_kept(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "tune.csv"
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda s: update_ledger(path, [ledger_row(_result(s, 0.1))]), range(40)))
    assert sorted(r["seed"] for r in read_ledger(path)) == list(range(40))


def test_a_run_without_epoch_times_leaves_the_column_blank(tmp_path):
    res = _result(0, 0.1)
    res.timing_s = {"fit": 10.0}  # written before epoch times were recorded
    row = update_ledger(tmp_path / "runs.csv", [ledger_row(res)])[0]
    assert math.isnan(row["train_epoch_s"]) and row["fit_s"] == 10.0


def test_row_keeps_the_diagnostics_of_the_best_validation_only(tmp_path):
    res = _result(0, 0.1)
    res.history = [{"epoch": 144, "val/ndcg@20": 0.10, "diag/thm32_holds": 0.5},
                   {"epoch": 149, "val/ndcg@20": 0.11, "diag/thm32_holds": 1.0, "diag/thm32_holds_without_self": 0.25},
                   {"epoch": 154, "val/ndcg@20": 0.09, "diag/thm32_holds": 0.0}]
    row = update_ledger(tmp_path / "runs.csv", [ledger_row(res)])[0]
    assert row["diag/thm32_holds"] == 1.0 and row["diag/thm32_holds_without_self"] == 0.25
    assert not [c for c in row if c.startswith("diag/")][2:]  # nothing from other epochs
    assert "diag/thm32_holds" not in ledger_row(_result(0, 0.1))  # no history, no diagnostics


def test_same_seed_replaces_and_rows_come_back_sorted(tmp_path):
    path = tmp_path / "runs.csv"
    update_ledger(path, [ledger_row(_result(s, 0.1 + s / 100)) for s in (4, 0)])
    update_ledger(path, [ledger_row(_result(2, 0.12)), ledger_row(_result(0, 0.5))])
    rows = read_ledger(path)
    assert [r["seed"] for r in rows] == [0, 2, 4]
    assert ledger_values(rows, "test/ndcg@20") == {0: 0.5, 2: 0.12, 4: 0.14}


def test_a_ledger_holds_one_setting_and_one_data_version(tmp_path):
    path = tmp_path / "runs.csv"
    update_ledger(path, [ledger_row(_result(0, 0.1))])
    with pytest.raises(BenchError, match=r"setting .*loss.tau=0.1.*seed 1 ran with .*loss.tau=0.2.*another folder"):
        update_ledger(path, [ledger_row(_result(1, 0.1, tau="0.2"))])
    with pytest.raises(BenchError, match=r"holds runs with data .*seed 1 ran with"):
        update_ledger(path, [ledger_row(_result(1, 0.1, sha="cd" * 32))])
    assert [r["seed"] for r in read_ledger(path)] == [0]  # a refused update writes nothing


def test_metric_columns_may_differ_between_rows(tmp_path):
    path = tmp_path / "runs.csv"
    old = ledger_row(_result(0, 0.1))
    new = ledger_row(_result(1, 0.2), {"ref/ndcg@20": 0.19})
    rows = update_ledger(path, [old, new])
    assert math.isnan(read_ledger(path)[0]["ref/ndcg@20"])
    assert ledger_values(read_ledger(path), "ref/ndcg@20") == {1: 0.19}
    assert len(rows) == 2


def test_bad_files_are_named_with_line_and_fix(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("metric,value\nndcg@20,0.1\n")
    with pytest.raises(BenchError, match=r"runs.csv is not a run ledger \(no seed, setting column\); move it aside"):
        read_ledger(path)
    path.write_text("seed,setting,test/ndcg@20\n0,loss=sl,0.1\n1,loss=sl,zero\n")
    with pytest.raises(BenchError, match=r"runs.csv, line 3: .*fix or delete that row"):
        read_ledger(path)
    assert read_ledger(tmp_path / "absent.csv") == []


def test_per_edge_metrics_get_their_own_columns(tmp_path):
    from bench.records.ledger import metric_column

    res = _result(0, 0.2)
    res.per_edge = {"edges": 1054, "mrr": 0.21, "hit@20": 0.55}
    rows = update_ledger(tmp_path / "runs.csv", [ledger_row(res)])
    assert rows[0]["edge/mrr"] == 0.21 and rows[0]["edge/hit@20"] == 0.55 and "edge/edges" not in rows[0]
    assert ledger_values(rows, metric_column("edge:mrr")) == {0: 0.21}
    assert ledger_values(rows, metric_column("ndcg@20")) == {0: 0.2}
    assert metric_column("diag/thm32_holds") == "diag/thm32_holds"


def test_per_user_values_are_kept_beside_their_row_only(tmp_path):
    import numpy as np

    from bench.records import write_per_user
    from bench.records.ledger import keep_per_user, kept_per_user, per_user_path

    path = tmp_path / "final_sl.csv"
    res = _result(2, 0.1)
    res.run_dir = tmp_path / "run"
    res.run_dir.mkdir()
    users = np.array([0, 1, 2, 5, 9, 40])  # gaps: the users that had a test item
    ndcg = np.array([0.0, 1.0, 0.5, 0.0, 1 / np.log2(4), 0.0])
    write_per_user(res.run_dir / "per_user_test.npz", users,
                   {"ndcg@20": ndcg, "hit@20": (ndcg > 0).astype(float), "recall@50": ndcg})
    (row,) = update_ledger(path, [ledger_row(res)])
    assert kept_per_user(path, row) is None  # nothing kept yet
    assert keep_per_user(path, res, ("ndcg@20", "hit@20")) == per_user_path(path, 2) == (
        tmp_path / "final_sl.per_user" / "seed2.npz")
    back_users, back = kept_per_user(path, row)
    assert back_users.tolist() == users.tolist() and sorted(back) == ["hit@20", "ndcg@20"]
    assert back["ndcg@20"].tolist() == ndcg.tolist() and back["hit@20"].tolist() == [0, 1, 1, 0, 1, 0]
    # another run of seed 2 (the row replaced by a rerun elsewhere) does not take these users
    assert kept_per_user(path, {**row, "finished_at": "2026-12-09T00:00:00"}) is None
    with pytest.raises(BenchError, match=r"no mrr@10 \(it has hit@20, ndcg@20, recall@50\)"):
        keep_per_user(path, res, ("mrr@10",))
    res.run_dir = tmp_path / "elsewhere"  # a run that saved no per-user file keeps nothing
    assert keep_per_user(path, res, ("ndcg@20",)) is None


def test_a_recorded_run_keeps_the_per_user_values_asked_for(tmp_path, monkeypatch):
    import numpy as np

    from bench import resumable as ledger_module
    from bench.records import write_per_user
    from bench.records.ledger import kept_per_user
    from bench.resumable import finish_recorded

    def fake_finish(folder, overrides, log=None, env=None):  # what python -m bench leaves behind
        res = _result(0, 0.2)
        res.overrides = list(overrides)
        res.write(folder)
        write_per_user(folder / "per_user_test.npz", np.arange(3), {"ndcg@20": np.array([0.0, 0.2, 0.4])})
        return "started"

    monkeypatch.setattr(ledger_module, "finish_run", fake_finish)
    path = tmp_path / "final_sl.csv"
    assert finish_recorded(tmp_path / "run", _result(0, 0.2).overrides, path, per_user=("ndcg@20",)) == "started"
    users, values = kept_per_user(path, read_ledger(path)[0])
    assert users.tolist() == [0, 1, 2] and values["ndcg@20"].tolist() == [0.0, 0.2, 0.4]
