"""Seed summaries: statistics against hand computation, rows as the report labels them, failures listed."""

import json
import math

import pytest
from scipy import stats

from bench.records import find_runs
from bench.report.stats import t_interval
from bench.report.summary import summarize, write_summary


def test_t_interval_by_hand():
    r = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    s = math.sqrt(2.5)
    assert (r["n"], r["mean"], r["std"]) == (5, 3.0, pytest.approx(s))
    assert r["ci_half"] == pytest.approx(2.7764451 * s / math.sqrt(5), rel=1e-6)  # t(0.975, 4) = 2.776
    assert r["ci_low"] == pytest.approx(3.0 - r["ci_half"])
    one = t_interval([0.5])
    assert one["n"] == 1 and math.isnan(one["ci_half"])


def _fake_run(root, name, loss, overrides, seed, ndcg, status="completed"):
    d = root / name
    d.mkdir(parents=True)
    config = {"seed": seed, "task": {"name": "cf"}, "dataset": {"name": "toy"}, "model": {"name": "mf"},
              "loss": {"name": loss}}
    payload = {"status": status, "overrides": [f"loss={loss}", *overrides, f"seed={seed}"], "config": config}
    if status == "completed":
        payload["test"] = {"ndcg@20": ndcg, "recall@20": ndcg * 1.5}
    else:
        payload["error"] = "ValueError: boom"
    (d / "results.json").write_text(json.dumps(payload))


def test_summary_groups_by_configuration_and_lists_failures(tmp_path):
    sl = [0.12, 0.13, 0.125]
    for i, v in enumerate(sl):
        _fake_run(tmp_path, f"{i}", "sl", [], i, v)
    for i, v in enumerate([0.10, 0.11]):
        _fake_run(tmp_path, f"{3 + i}", "bpr", [], i, v)
    _fake_run(tmp_path, "5", "bpr", [], 2, None, status="failed")
    runs, summary, md = write_summary(tmp_path)
    row = summary[(summary.row == "sl") & (summary.metric == "ndcg@20")].iloc[0]
    assert row["n"] == 3 and row["mean"] == pytest.approx(sum(sl) / 3) and row["seeds"] == "0,1,2"
    half = stats.t.ppf(0.975, 2) * stats.tstd(sl) / math.sqrt(3)
    assert row["ci_half"] == pytest.approx(half)
    assert summary[(summary.row == "bpr") & (summary.metric == "ndcg@20")].iloc[0]["n"] == 2
    assert "Runs that did not complete" in md and "ValueError: boom" in md
    assert (tmp_path / "summary.csv").read_text().startswith(
        "task,dataset,model,row,metric,n,mean,std,ci_low,ci_high,ci_half,seeds\n")
    assert len(runs) == 6 and len(find_runs([tmp_path])[0]) == 6
    line = next(x for x in md.splitlines() if x.startswith("| toy · mf | sl |"))
    assert line.startswith("| toy · mf | sl | 0.1875 ± ") and "| 0.1250 ± " in line and "(n=3)" in line
    table, records = summarize(runs)
    assert len(table) == 4 and len(records) == 5  # 2 rows x 2 metrics, from the 5 completed runs
    assert "one seed's value" not in md  # every row has 2 or more seeds
    _fake_run(tmp_path, "6", "psl", [], 0, 0.2)
    md = write_summary(tmp_path)[2]
    assert "(n=1) is one seed's value, with no interval until more seeds run" in md and "0.2000 (n=1)" in md


def test_rows_are_told_apart_by_the_overrides_that_differ(tmp_path):
    for seed, v in enumerate([0.1, 0.11]):
        _fake_run(tmp_path, f"a{seed}", "sl", ["trainer.max_epochs=3"], seed, v)
        _fake_run(tmp_path, f"b{seed}", "sl", ["trainer.max_epochs=3", "loss.tau=0.1"], seed, v + 0.02)
    _, summary, md = write_summary(tmp_path)
    ndcg = summary[summary.metric == "ndcg@20"].set_index("row")
    assert sorted(ndcg.index) == ["sl", "sl loss.tau=0.1"]  # the override all runs share names no row
    assert ndcg.at["sl loss.tau=0.1", "mean"] == pytest.approx(0.125)
    assert "Runs that did not complete" not in md


def test_the_headline_adds_the_metric_the_runs_were_selected_by(tmp_path):
    """Learning-to-rank runs pick checkpoints by NDCG@5: it joins the headline after the usual ones."""
    for seed, v in enumerate([0.6, 0.7]):
        d = tmp_path / str(seed)
        d.mkdir()
        config = {"seed": seed, "task": {"name": "ltr"}, "dataset": {"name": "mq2008"}, "model": {"name": "linear"},
                  "loss": {"name": "sl"}, "train": {"monitor": "ndcg@5"}}
        payload = {"status": "completed", "overrides": ["loss=sl", f"seed={seed}"], "config": config,
                   "test": {"ndcg@20": v + 0.1, "ndcg@5": v}}
        (d / "results.json").write_text(json.dumps(payload))
    _, _, md = write_summary(tmp_path)
    assert "| data · model | configuration | ndcg@20 | ndcg@5 |" in md
    assert "| mq2008 · linear (ltr) | sl | 0.7500 ± " in md and "| 0.6500 ± " in md
