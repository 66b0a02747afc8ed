"""Training-loop callbacks: the time estimate and the progress bar factory."""

from __future__ import annotations

import logging
import re

import pytest

from bench.run import train_and_test
from bench.tasks import callbacks
from bench.tasks.callbacks import StepProgressBar, TimeEstimate, early_stopping, progress_bar


@pytest.mark.slow
def test_time_estimate_is_logged_after_the_first_steps_and_after_the_first_validation(tiny, make_cfg, tmp_path,
                                                                                        caplog):
    cfg = make_cfg([*tiny, "trainer.max_epochs=4", "trainer.check_val_every_n_epoch=2", "logger=none",
                    "callbacks.time_estimate.after_batches=1"], tmp_path)
    with caplog.at_level(logging.INFO, logger="bench.tasks.callbacks"):
        train_and_test(cfg)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("time estimate:")]
    assert len(lines) == 2, lines
    assert re.fullmatch(r"time estimate: [\d.]+ s per epoch; 4 epochs ≈ [\d.]+ s, plus validation \(timed at the "
                        r"first one\)", lines[0])
    assert re.fullmatch(r"time estimate: [\d.]+ s per epoch \(mean of 1 timed epoch\); 4 epochs ≈ [\d.]+ s, plus 2 "
                        r"validations of [\d.]+ s", lines[1])


def test_the_estimate_after_the_first_validation_uses_the_timed_epochs_not_the_warm_up(monkeypatch, caplog):
    # a fake clock: the first 2 steps take 10 s each (warm-up), later steps 1 s, 10 steps an
    # epoch, 3 s per validation every 2 epochs; the first estimate scales the warm-up (100 s an
    # epoch), the second averages the timed epochs after the first: epoch 0 is 10 + 10 + 8 = 28 s,
    # epoch 1 10 s (its training part, validation apart), so 10 s an epoch, 4 epochs + 2 rounds
    clock = [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: clock[0])

    class Trainer:
        num_training_batches, max_epochs, check_val_every_n_epoch, sanity_checking = 10, 4, 2, False

    est, trainer = TimeEstimate(after_batches=2), Trainer()
    with caplog.at_level(logging.INFO, logger="bench.tasks.callbacks"):
        for epoch in range(2):
            est.on_train_epoch_start(trainer, None)
            for step in range(10):
                clock[0] += 10.0 if epoch == 0 and step < 2 else 1.0
                est.on_train_batch_end(trainer, None, None, None, step)
            if epoch == 1:
                est.on_validation_start(trainer, None)
                clock[0] += 3.0
                est.on_validation_end(trainer, None)
            est.on_train_epoch_end(trainer, None)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("time estimate:")]
    assert lines == ["time estimate: 100.0 s per epoch; 4 epochs ≈ 7 min, plus validation (timed at the first one)",
                     "time estimate: 10.0 s per epoch (mean of 1 timed epoch); 4 epochs ≈ 46 s, plus 2 validations "
                     "of 3.00 s"]
    assert est.epochs == [28.0, 10.0]


def test_a_resumed_run_is_also_told_what_is_left(monkeypatch, caplog):
    # resumed at epoch 6 of 10, validation every 2: 4 epochs of 10 s and rounds 8 and 10 (2 x 3 s) are left
    clock = [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: clock[0])

    class Trainer:
        num_training_batches, max_epochs, check_val_every_n_epoch, sanity_checking, current_epoch = 10, 10, 2, False, 6

    est, trainer = TimeEstimate(after_batches=10), Trainer()
    with caplog.at_level(logging.INFO, logger="bench.tasks.callbacks"):
        est.on_train_epoch_start(trainer, None)
        for step in range(10):
            clock[0] += 1.0
            est.on_train_batch_end(trainer, None, None, None, step)
        est.on_validation_start(trainer, None)
        clock[0] += 3.0
        est.on_validation_end(trainer, None)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("time estimate:")]
    assert lines[0].endswith("; resumed at epoch 6, the 4 left ≈ 40 s")
    assert lines[1].endswith("plus 5 validations of 3.00 s; resumed at epoch 6, the 4 left ≈ 46 s")


def test_optional_callbacks_are_left_out_when_off():
    assert early_stopping("val/ndcg@20", None) is None and progress_bar(False) is None
    assert isinstance(progress_bar(True), StepProgressBar)
    stop = early_stopping("val/ndcg@20", 3)
    assert stop.patience == 3 and stop.monitor == "val/ndcg@20" and stop.mode == "max"


@pytest.mark.parametrize("every", [1, 3])
def test_last_ckpt_holds_the_best_checkpoints_record_of_its_own_epoch(every, tiny, make_cfg, tmp_path):
    """With validation every epoch (and on the last epoch whatever the interval) Lightning's
    ModelCheckpoint saves at the end of the training epoch: last.ckpt, written after it, must hold
    that epoch's best score, or a resumed run would take a worse model for an improvement."""
    import torch

    cfg = make_cfg([*tiny, "trainer.max_epochs=3", f"trainer.check_val_every_n_epoch={every}", "logger=none"],
                   tmp_path)
    res = train_and_test(cfg)
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    (record,) = [v for k, v in state["callbacks"].items() if k.startswith("ModelCheckpoint")]
    scores = [h["val/ndcg@20"] for h in res.history if "val/ndcg@20" in h]
    assert float(record["best_model_score"]) == pytest.approx(max(scores), abs=1e-7)
    assert record["best_model_path"].endswith("best.ckpt") and res.best["epoch"] == 2  # the last epoch was the best
