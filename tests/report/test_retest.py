"""Testing a finished run again under other evaluation settings: the validation-mask switch,
tie rules, runs that predate a setting, and the noise scenario recorded by a run."""

from __future__ import annotations

import pytest
import torch

from bench.analysis.checkpoints import load_model, retest, run_datamodule
from bench.app import compose
from bench.composition import recompose_run
from bench.errors import BenchError, ConfigError
from bench.evaluation import FullRankingEvaluator
from bench.records import RunResult
from bench.run import train_and_test

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished(tiny, tmp_path_factory) -> RunResult:
    where = tmp_path_factory.mktemp("retest")
    overrides = [*tiny, "logger=none", "dataset.noise_ratio=0.1"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BENCH_CACHE_DIR", str(where / "cache"))
        train_and_test(compose([*overrides, f"output_dir={where / 'run'}"]), overrides=overrides)
    return RunResult.read(where / "run")


def test_retest_repeats_the_run_and_the_switch_leaves_validation_items_unmasked(finished):
    users, metrics, ties = retest(finished)
    assert {k: float(v.mean()) for k, v in metrics.items()} == pytest.approx(finished.test, abs=1e-12)
    assert ties == finished.ties and ties["rule"] == "expected"
    _, leaky, _ = retest(finished, ["eval.test_masks_valid=false"])
    dm = run_datamodule(finished)
    model = load_model(finished, finished.best_checkpoint, dm.train_data)
    by_hand = FullRankingEvaluator(dm.splits.test, [dm.splits.train], finished.config["eval"]["ks"])
    want = by_hand.evaluate(model.full_scorer("test"))
    for key in ("ndcg@20", "recall@5", "mrr@10"):
        torch.testing.assert_close(leaky[key], want[key])
    # validation items compete for places: never better, here strictly worse somewhere
    assert (leaky["ndcg@20"] <= metrics["ndcg@20"] + 1e-12).all()
    assert (leaky["ndcg@20"] < metrics["ndcg@20"] - 1e-9).any()


def test_only_evaluation_settings_may_change_and_noise_is_recorded(finished):
    with pytest.raises(BenchError, match="loss.tau=0.5 would change it"):
        retest(finished, ["loss.tau=0.5"])
    noise = finished.data["noise"]
    assert noise["ratio"] == 0.1 and noise["seed"] == 0 and noise["n_flipped"] > 0
    dm = run_datamodule(finished)  # the rebuilt run has the same noisy training split
    assert dm.splits.train.nnz == finished.data["n_train"]


def test_a_run_that_predates_tie_rules_is_retested_with_the_id_order(finished, tmp_path):
    old = RunResult.read(finished.run_dir)
    del old.config["eval"]["ties"]
    cfg = recompose_run(old, tmp_path)
    assert cfg.eval.ties == "lowest_id"
    assert recompose_run(old, tmp_path, ["eval.ties=pessimistic"], evaluation=True).eval.ties == "pessimistic"


def test_noise_outside_collaborative_filtering_fails_in_one_line(tmp_path):
    cfg = compose(["task=linkpred", "model=gnn", "dataset=synthetic-graph", "dataset.noise_ratio=0.1",
                   f"output_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="only task=cf has; set it to 0 for task=linkpred"):
        train_and_test(cfg)
