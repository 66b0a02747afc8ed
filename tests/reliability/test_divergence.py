"""Divergence is never recorded as success (issue 42, class 6): a loss that explodes without
overflowing (BPR at lr 1e6: a training loss of 4e12, which used to end "completed") or becomes
NaN stops the run as "diverged", with one line, before a checkpoint of the blown-up model."""

from __future__ import annotations

import math

import pytest
import torch

from bench.errors import TrainingDiverged
from bench.records import RunResult
from bench.tasks.module import RankingModule


def _module(factor=1000.0):
    module = RankingModule.__new__(RankingModule)  # only the divergence bookkeeping is exercised
    module.divergence_factor, module.initial_loss = factor, None
    return module


@pytest.mark.parametrize("initial,mean,diverged", [
    (0.693, 692.0, False),       # BPR's start, a loss 1000x higher than that is still allowed (floor 1)
    (0.693, 1001.0, True),
    (7.2, 7100.0, False),        # SL: log(N) scale
    (7.2, 7300.0, True),
    (-0.3, -0.9, False),         # a negative loss (-NDCG surrogates) that improves
    (0.693, math.nan, True),
    (0.693, math.inf, True),
    (0.693, 4.4e12, True),       # the case
])
def test_an_epoch_mean_over_the_factor_times_the_first_batch_is_divergence(initial, mean, diverged):
    module = _module()
    module._note_loss(torch.tensor(initial))
    module._note_loss(torch.tensor(123.0))  # only the first batch sets the scale
    assert module.initial_loss == pytest.approx(initial)
    if diverged:
        with pytest.raises(TrainingDiverged, match="training diverged: epoch 3's mean training loss is"):
            module._check_divergence(mean, 3)
    else:
        module._check_divergence(mean, 3)
    off = _module(None)
    off._note_loss(torch.tensor(initial))
    off._check_divergence(4.4e12, 3)  # train.divergence_factor=null turns the check off


@pytest.mark.slow
def test_bpr_at_lr_1e6_ends_diverged_in_one_line(tiny, run_cli, tmp_path):
    proc = run_cli([*tiny, "loss=bpr", "optimizer.lr=1e6", "logger=none", "hydra.run.dir=run"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "training diverged: epoch 0's mean training loss is" in errors[0]
    res = RunResult.read(tmp_path / "run")
    assert res.status == "diverged" and res.test == {} and "training diverged" in (res.error or "")
    assert not (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()  # the blown-up model is not kept
    # the same run with the check off completes on nonsense, which is what the check is for
    proc = run_cli([*tiny, "loss=bpr", "optimizer.lr=1e6", "logger=none", "train.divergence_factor=null",
                    "hydra.run.dir=off"], tmp_path)
    assert proc.returncode == 0 and RunResult.read(tmp_path / "off").status == "completed"
