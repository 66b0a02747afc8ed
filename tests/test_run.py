"""End to end through the Python API: results, reproducibility, resume, learning, failures."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.app import CONFIG_DIR
from bench.datasets import load_dataset, split_validation
from bench.errors import TrainingDiverged
from bench.evaluation import FullRankingEvaluator
from bench.losses import LOSSES, RecLoss
from bench.records import RunResult, read_json, read_per_user
from bench.run import train_and_test

pytestmark = pytest.mark.slow

LOSS_CONFIGS = sorted(p.stem for p in (Path(CONFIG_DIR) / "loss").glob("*.yaml"))


def test_short_run_writes_complete_results(tmp_path, tiny, make_cfg):
    cfg = make_cfg(tiny, tmp_path)
    res = train_and_test(cfg, overrides=["seed=0"])
    assert isinstance(res, RunResult)
    on_disk = read_json(tmp_path / "results.json")
    assert on_disk["status"] == "completed"
    assert set(on_disk) >= {"config", "best", "test", "history", "timing_s", "data", "overrides"}
    assert len(on_disk["test"]) == 25 and 0 < on_disk["test"]["ndcg@20"] <= 1
    assert [h["epoch"] for h in on_disk["history"]] == [0, 1, 2]
    best = max(on_disk["history"], key=lambda h: h["val/ndcg@20"])
    assert on_disk["best"]["epoch"] == best["epoch"]
    assert set(on_disk["timing_s"]) == {"data", "fit", "test", "total", "train_epoch_median"}
    users, per_user = read_per_user(tmp_path / "per_user_test.npz")
    assert users.size == on_disk["data"]["test_users"]
    for key, value in on_disk["test"].items():
        assert np.mean(per_user[key]) == pytest.approx(value, rel=1e-12)
    assert (tmp_path / "csv" / "metrics.csv").exists()
    assert res.test == on_disk["test"] and res.overrides == ["seed=0"] == on_disk["overrides"]
    assert (tmp_path / "checkpoints" / "best.ckpt").exists() and (tmp_path / "checkpoints" / "last.ckpt").exists()


def test_test_metrics_are_the_best_checkpoint_evaluated_with_train_and_valid_masked(tmp_path, tiny, make_cfg):
    cfg = make_cfg([*tiny, "trainer.max_epochs=4"], tmp_path)
    res = train_and_test(cfg)
    ckpt = torch.load(res.best_checkpoint, weights_only=True)
    assert ckpt["epoch"] == res.best["epoch"]
    data = load_dataset(cfg.dataset)
    splits = split_validation(data, 0.1, seed=cfg.seed)
    user_emb, item_emb = ckpt["state_dict"]["model.user_emb.weight"], ckpt["state_dict"]["model.item_emb.weight"]
    norm = torch.nn.functional.normalize
    ev = FullRankingEvaluator(splits.test, [splits.train, splits.valid], ks=(20,))
    got = ev.evaluate(lambda u: norm(user_emb[u], dim=1) @ norm(item_emb, dim=1).T)
    assert got["ndcg@20"].mean().item() == pytest.approx(res.test["ndcg@20"], rel=1e-9)


def test_same_seed_same_metrics_different_seed_different(tmp_path, tiny, make_cfg):
    a = train_and_test(make_cfg([*tiny, "seed=3"], tmp_path / "a"))
    b = train_and_test(make_cfg([*tiny, "seed=3"], tmp_path / "b"))
    c = train_and_test(make_cfg([*tiny, "seed=4"], tmp_path / "c"))
    assert a.test == b.test and a.history == b.history
    assert a.test != c.test


# slk, songk and sogclr carry state in buffers; advinfonce has its own parameters and optimiser group
@pytest.mark.parametrize("loss", ["sl", "slk", "songk", "sogclr", "advinfonce"])
def test_killed_run_resumes_to_the_same_results(loss, tmp_path, tiny, make_cfg, crash_at, loss_settings):
    extra = ["loss.t_beta=2", "loss.diagnostics_users=16"] if loss == "slk" else loss_settings(loss)
    overrides = [*tiny, f"loss={loss}", *extra, "trainer.max_epochs=5", "trainer.check_val_every_n_epoch=2"]
    full = train_and_test(make_cfg(overrides, tmp_path / "full"))
    cfg = make_cfg(overrides, tmp_path / "killed")
    with pytest.raises((KeyboardInterrupt, SystemExit)):  # Lightning exits after a graceful shutdown
        train_and_test(cfg, extra_callbacks=[crash_at(3)])
    assert read_json(tmp_path / "killed" / "results.json")["status"] == "running"
    resumed = train_and_test(cfg, resume_checkpoint=tmp_path / "killed" / "checkpoints" / "last.ckpt")
    assert resumed.test == full.test
    assert resumed.history == full.history  # validation at epochs 1, 3 and the last (4)
    assert [h["epoch"] for h in full.history] == [1, 3, 4]
    assert resumed.resumed_from.endswith("last.ckpt") and full.resumed_from is None


def test_run_shorter_than_the_validation_interval_still_validates_and_tests(tmp_path, tiny, make_cfg):
    res = train_and_test(make_cfg([*tiny, "trainer.max_epochs=2", "trainer.check_val_every_n_epoch=5"], tmp_path))
    assert [h["epoch"] for h in res.history] == [1] and res.best["epoch"] == 1


def test_sl_learns_more_than_popularity(tmp_path, make_cfg):
    cfg = make_cfg(["trainer.max_epochs=20", "trainer.check_val_every_n_epoch=5", "trainer.accelerator=cpu",
                    "logger=none"], tmp_path)
    res = train_and_test(cfg)
    data = load_dataset(cfg.dataset)
    splits = split_validation(data, 0.1, seed=0)
    popularity = torch.bincount(splits.train.indices, minlength=splits.n_items).double()
    ev = FullRankingEvaluator(splits.test, [splits.train, splits.valid], ks=(20,))
    pop = ev.evaluate(lambda u: popularity.expand(u.numel(), -1).clone())["ndcg@20"].mean().item()
    assert res.test["ndcg@20"] > 1.3 * pop, (res.test["ndcg@20"], pop)


@LOSSES.register("nan_for_tests")
class _NaNLoss(RecLoss):
    def forward(self, batch):
        return batch.pos.sum() * math.nan


def test_nan_loss_stops_with_a_clear_message(tmp_path, tiny, make_cfg):
    cfg = make_cfg([*tiny, "loss=sl"], tmp_path)
    cfg.loss = {"_target_": "bench.losses.build", "name": "nan_for_tests", "n_negatives": 5}
    with pytest.raises(TrainingDiverged, match=r"training loss is nan at epoch 0, batch 0; lower optimizer.lr"):
        train_and_test(cfg)


def test_bpr_runs_with_dot_scores(tmp_path, tiny, make_cfg):
    res = train_and_test(make_cfg([*tiny, "loss=bpr"], tmp_path))
    assert res.config["model"]["score"] == "dot" and res.test["ndcg@20"] > 0


def test_early_stopping_ends_a_run_that_stops_improving(tmp_path, tiny, make_cfg):
    # lr = 0: validation NDCG never improves after the first round
    cfg = make_cfg([*tiny, "trainer.max_epochs=30", "optimizer.lr=0.0", "train.early_stopping_patience=2"], tmp_path)
    res = train_and_test(cfg)
    assert [h["epoch"] for h in res.history] == [0, 1, 2]
    assert res.best["epoch"] == 0 and res.epochs_trained == 3


@pytest.mark.parametrize("loss", LOSS_CONFIGS)
def test_every_loss_config_trains_end_to_end(loss, tmp_path, tiny, make_cfg, loss_settings):
    res = train_and_test(make_cfg([*tiny, f"loss={loss}", "trainer.max_epochs=2", *loss_settings(loss)], tmp_path))
    assert res.status == "completed" and 0 <= res.test["ndcg@20"] <= 1
    if loss == "slk":  # beta was refreshed and diagnosed
        last = res.history[-1]
        assert last["diag/beta_effective_rank_median"] >= 1 and 0 <= last["diag/beta_overestimate_rate"] <= 1
