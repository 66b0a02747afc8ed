"""``python -m bench.thresholds`` on a trained run: every estimator measured against exact."""

import pandas as pd
import pytest

from bench.run import train_and_test
from bench.thresholds.__main__ import main as study_main


@pytest.mark.slow
def test_study_on_a_trained_run_measures_every_estimator_against_exact(tmp_path, tiny, make_cfg):
    run = tmp_path / "run"
    overrides = [*tiny, "loss=slk", "loss.t_beta=1", "logger=none"]
    train_and_test(make_cfg(overrides, run), overrides=overrides)  # recorded: the study rebuilds the run from them
    assert study_main([str(run), "--ks", "5", "20", "--cache-from", "best", "--out", str(tmp_path / "s")]) == 0
    table = pd.read_csv(tmp_path / "s" / "threshold_study.csv")
    assert len(table) == 2 * 5 and set(table["k"]) == {5, 20}
    safe = table[table["estimator"].isin(["sampled", "cached"])]
    assert (safe["overestimates"] == 0).all()  # safe estimators, even with a stale cache
    cp = table.iloc[0]
    assert cp["overestimate_ci_high"] == pytest.approx(1 - 0.025 ** (1 / cp["users"]), rel=1e-6)  # CP for 0 of n
    assert (table["effective_rank_median"] >= 1).all()
    assert (tmp_path / "s" / "effective_ranks.png").is_file()
    assert study_main([str(tmp_path / "nowhere")]) == 2
