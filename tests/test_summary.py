"""Seed summary statistics against hand computation."""

import json
import math

import pytest
from scipy import stats

from bench.summary import collect_runs, config_key, summarize, t_interval, write_summary


def test_t_interval_by_hand():
    r = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    s = math.sqrt(2.5)
    assert (r["n"], r["mean"], r["std"]) == (5, 3.0, pytest.approx(s))
    assert r["ci_half"] == pytest.approx(2.7764451 * s / math.sqrt(5), rel=1e-6)  # t(0.975, 4) = 2.776
    assert r["ci_low"] == pytest.approx(3.0 - r["ci_half"])
    one = t_interval([0.5])
    assert one["n"] == 1 and math.isnan(one["ci_half"])


def test_config_key_ignores_only_the_seed():
    assert config_key(["loss=sl", "seed=3", "dataset=health"]) == "dataset=health loss=sl"
    assert config_key(["seed=1"]) == "(all runs)"
    assert config_key(["+seed_offset=1", "seed=1"]) == "+seed_offset=1"


def _fake_run(root, name, overrides, seed, ndcg, status="completed"):
    d = root / name
    d.mkdir(parents=True)
    payload = {"status": status, "overrides": overrides + [f"seed={seed}"], "config": {"seed": seed}}
    if status == "completed":
        payload["test"] = {"ndcg@20": ndcg, "recall@20": ndcg * 1.5}
    else:
        payload["error"] = "ValueError: boom"
    (d / "results.json").write_text(json.dumps(payload))


def test_summary_groups_by_configuration_and_lists_failures(tmp_path):
    sl = [0.12, 0.13, 0.125]
    for i, v in enumerate(sl):
        _fake_run(tmp_path, f"{i}", ["loss=sl"], i, v)
    for i, v in enumerate([0.10, 0.11]):
        _fake_run(tmp_path, f"{3 + i}", ["loss=bpr"], i, v)
    _fake_run(tmp_path, "5", ["loss=bpr"], 2, None, status="failed")
    runs, summary, md = write_summary(tmp_path)
    row = summary[(summary.config == "loss=sl") & (summary.metric == "ndcg@20")].iloc[0]
    assert row["n"] == 3 and row["mean"] == pytest.approx(sum(sl) / 3)
    half = stats.t.ppf(0.975, 2) * stats.tstd(sl) / math.sqrt(3)
    assert row["ci_half"] == pytest.approx(half)
    assert summary[(summary.config == "loss=bpr") & (summary.metric == "ndcg@20")].iloc[0]["n"] == 2
    assert "Runs that did not complete" in md and "ValueError: boom" in md
    assert (tmp_path / "summary.csv").read_text().startswith("config,metric,n,mean,std,ci_low,ci_high,ci_half")
    assert len(collect_runs(tmp_path)) == 6
    line = next(x for x in md.splitlines() if x.startswith("| loss=sl |"))
    assert line.startswith("| loss=sl | 0.1875 ± ") and "| 0.1250 ± " in line and "(n=3)" in line
    assert len(summarize(runs)) == 4
