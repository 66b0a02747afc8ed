"""Rebuilding a saved run's config from conf/ and its recorded overrides (never from its files)."""

from __future__ import annotations

import copy

import pytest
import torch
from omegaconf import OmegaConf

from bench.composition import compose, is_extending, recompose_run
from bench.errors import BenchError
from bench.records import RunResult


@pytest.fixture
def saved(tmp_path, tiny):
    overrides = [*tiny, "loss=slk", "loss.tau_w=2.0"]
    cfg = compose([*overrides, f"output_dir={tmp_path}"])
    return RunResult(status="running", overrides=overrides, run_dir=tmp_path,
                     config=OmegaConf.to_container(cfg, resolve=True))


def test_a_run_rebuilds_to_its_saved_values_in_its_current_folder(saved, tmp_path):
    cfg = recompose_run(saved, tmp_path / "moved")
    assert cfg.loss.tau_w == 2.0 and cfg.dataset.n_users == 120 and cfg.output_dir == str(tmp_path / "moved")
    cfg = recompose_run(saved, tmp_path, ["trainer.max_epochs=9"])
    assert cfg.trainer.max_epochs == 9


def test_settings_newer_than_the_run_take_their_defaults_others_must_agree(saved, tmp_path):
    older = copy.deepcopy(saved)
    del older.config["optimizer"]["foreach"]  # a run from before the setting existed
    assert recompose_run(older, tmp_path).optimizer.foreach is True
    changed = copy.deepcopy(saved)
    changed.config["loss"]["tau_w"] = 3.0
    with pytest.raises(BenchError, match=r"rebuilds the run with other values \(loss\.tau_w: 3\.0 -> 2\.0\)"):
        recompose_run(changed, tmp_path)
    before = copy.deepcopy(saved)
    before.config["trainer"]["deterministic"] = False  # started when the default was false
    assert recompose_run(before, tmp_path).trainer.deterministic is False  # continues as it began
    gone = copy.deepcopy(saved)
    gone.config["loss"]["old_switch"] = 1  # a setting this code no longer has
    with pytest.raises(BenchError, match=r"loss\.old_switch: 1 -> \(absent\)"):
        recompose_run(gone, tmp_path)


def test_only_overrides_that_extend_a_run_are_accepted(saved, tmp_path):
    assert is_extending("trainer.max_epochs=300") and is_extending("logger=wandb") and is_extending("+logger.x=1")
    assert not is_extending("loss=bpr") and not is_extending("seed=3") and not is_extending("optimizer.lr=0.5")
    with pytest.raises(BenchError, match="resume continues the same experiment, and seed=3 optimizer.lr=0.5 would "
                                         "change it"):
        recompose_run(saved, tmp_path, ["seed=3", "optimizer.lr=0.5", "trainer.max_epochs=4"])


def test_fused_adam_turns_the_foreach_default_off(tiny):
    """torch refuses foreach and fused together; `optimizer.fused=true` alone must build an optimizer."""
    from hydra.utils import instantiate

    param = [torch.nn.Parameter(torch.zeros(3))]
    for fused in (False, True):
        optimizer = instantiate(compose([*tiny, f"optimizer.fused={fused}"]).optimizer)(param)
        assert optimizer.defaults["fused"] is fused and optimizer.defaults["foreach"] is (not fused)
