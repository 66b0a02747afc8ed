"""SL@K and SONG@K train end to end with each threshold estimator; their state is checkpointed."""

import pytest
import torch

from bench.run import train_and_test

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("estimator", ["sampled", "exact", "cached", "stratified", "binomial_safe", "quantile"])
def test_slk_trains_with_every_estimator_and_checkpoints_its_state(tmp_path, estimator, tiny, make_cfg):
    cfg = make_cfg([*tiny, "loss=slk", "loss.t_beta=1", f"loss.estimator={estimator}", "logger=none"], tmp_path)
    res = train_and_test(cfg)
    assert res.status == "completed"
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    if estimator == "cached":
        assert state["loss.estimator.top"].shape == (120, 64)
    if estimator == "quantile":
        assert torch.isfinite(state["loss.estimator.lam"]).any()
    beta = state["loss.beta"]
    assert torch.isfinite(beta).all() and (beta != 0).any()


def test_song_trains_with_a_cached_threshold(tmp_path, tiny, make_cfg):
    res = train_and_test(make_cfg([*tiny, "loss=songk", "loss.threshold=cached", "logger=none"], tmp_path))
    assert res.status == "completed"
