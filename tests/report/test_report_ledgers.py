"""bench.report reads committed run ledgers (runs.csv) as well as run folders: each setting is
composed again for its names and the paper's values, seed statistics and tests equal scipy's, rows
of different data refuse to pool, and a setting this code cannot compose is one clear error."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from bench.collect import from_directories
from bench.errors import BenchError
from bench.records.ledger import update_ledger
from bench.report import make_report

SL = [0.128, 0.130, 0.127]
SLK = [0.139, 0.142, 0.137]


def _ledger(folder: Path, setting: str, values: list[float], data: str = "abc123", ref_shift: float = 0.0) -> Path:
    rows = [{"seed": s, "setting": setting, "data": data, "finished_at": f"2026-12-0{s + 1}T10:00:00+00:00",
             "test/ndcg@20": v, "test/recall@20": 1.3 * v, "ref/ndcg@20": v - ref_shift} for s, v in enumerate(values)]
    update_ledger(folder / "runs.csv", rows)
    return folder / "runs.csv"


def test_ledgers_give_the_table_with_names_paper_values_and_seed_tests(tmp_path):
    _ledger(tmp_path / "health-mf-sl", "experiment=paper/table2_mf_health loss=sl trainer.max_epochs=200", SL)
    _ledger(tmp_path / "health-mf-slk-k5", "experiment=paper/table2_mf_health loss=slk loss.k=5 "
            "trainer.max_epochs=200", SLK)
    records, notes = from_directories([tmp_path])
    assert notes == []  # a folder of ledgers has no results.json, and that is not worth a note
    slk = next(r for r in records if r.loss == "slk")
    assert (slk.task, slk.dataset, slk.model, slk.k) == ("cf", "health", "mf", 5)
    assert slk.paper["ndcg@20"] == 0.1379  # Table 4's SL@5 value, from the experiment's variant
    assert slk.load_per_user() is None

    t = make_report(records, ["ndcg@20"], baseline="sl").table
    row = t[(t["row"] == "slk") & (t["metric"] == "ndcg@20")].iloc[0]
    assert row["name"] == "SL@5"
    assert row["mean"] == pytest.approx(np_mean(SLK)) and row["n"] == 3
    assert row["p_seed_t"] == pytest.approx(stats.ttest_rel(SLK, SL).pvalue)
    assert pd.isna(row["p_user_t"])  # no per-user values in a ledger
    assert row["paper"] == 0.1379


def np_mean(x: list[float]) -> float:
    return sum(x) / len(x)


def test_a_ledger_file_can_be_given_directly_and_other_data_refuses_to_pool(tmp_path):
    a = _ledger(tmp_path / "a", "experiment=paper/table2_mf_health loss=sl", SL)
    b = _ledger(tmp_path / "b", "experiment=paper/table2_mf_health loss=slk", SLK, data="def456")
    records, _ = from_directories([a])
    assert len(records) == 3
    with pytest.raises(BenchError, match="data set 'health' was read as data abc123 in .* and as def456"):
        make_report(from_directories([a, b])[0], ["ndcg@20"])


def test_a_setting_that_does_not_compose_is_one_clear_error(tmp_path):
    bad = _ledger(tmp_path / "x", "experiment=paper/no_such_table loss=sl", SL)
    with pytest.raises(BenchError, match=r"x/runs.csv: its recorded override 'experiment=paper/no_such_table' "
                                         "chooses experiment=paper/no_such_table, which conf/experiment/ does not "
                                         "define"):
        from_directories([bad])
    worse = _ledger(tmp_path / "y", "experiment=paper/table2_mf_health loss=sl +loss.tau=0.1", SL)
    with pytest.raises(BenchError, match=r"y/runs.csv: its setting '.*' does not compose"):
        from_directories([worse])


def test_the_reference_protocol_columns_are_a_metric_family_beside_the_paper(tmp_path):
    _ledger(tmp_path / "sl", "experiment=paper/table2_mf_health loss=sl", SL, ref_shift=0.004)
    _ledger(tmp_path / "slk", "experiment=paper/table2_mf_health loss=slk", SLK, ref_shift=0.003)
    t = make_report(from_directories([tmp_path])[0], ["ndcg@20", "ref:ndcg@20"], baseline="sl").table
    ref = t[t["metric"] == "ref:ndcg@20"].set_index("row")
    slk_ref = [v - 0.003 for v in SLK]
    assert ref.loc["slk", "mean"] == pytest.approx(np_mean(slk_ref))
    assert ref.loc["slk", "paper"] == 0.1390  # the paper's NDCG@20, measured here under the other protocol
    assert ref.loc["slk", "paper_gap"] == pytest.approx((np_mean(slk_ref) - 0.1390) / 0.1390)
    assert ref.loc["slk", "p_seed_t"] == pytest.approx(stats.ttest_rel(slk_ref, [v - 0.004 for v in SL]).pvalue)
    ours = t[t["metric"] == "ndcg@20"].set_index("row")
    assert ours.loc["slk", "mean"] == pytest.approx(np_mean(SLK))  # the test/ columns are untouched


def test_backbones_come_in_table_2_order_mf_lightgcn_xsimgcl(tmp_path):
    for backbone in ("xsimgcl", "lightgcn", "mf"):
        _ledger(tmp_path / backbone, f"experiment=paper/table2_{backbone}_health loss=sl", SL)
    report = make_report(from_directories([tmp_path])[0], ["ndcg@20"])
    assert list(dict.fromkeys(report.table["model"])) == ["mf", "lightgcn", "xsimgcl"]
    assert list(dict.fromkeys(report.table["dataset"])) == ["health"]
