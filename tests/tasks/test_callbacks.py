"""Training-loop callbacks: the time estimate and the progress bar factory."""

from __future__ import annotations

import logging
import re

import pytest

from bench.run import train_and_test
from bench.tasks.callbacks import StepProgressBar, early_stopping, progress_bar


@pytest.mark.slow
def test_time_estimate_is_logged_after_the_first_steps_and_after_the_first_validation(tiny, make_cfg, tmp_path,
                                                                                        caplog):
    cfg = make_cfg([*tiny, "trainer.max_epochs=4", "trainer.check_val_every_n_epoch=2", "logger=none",
                    "callbacks.time_estimate.after_batches=1"], tmp_path)
    with caplog.at_level(logging.INFO, logger="bench.tasks.callbacks"):
        train_and_test(cfg)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("time estimate:")]
    assert len(lines) == 2, lines
    assert re.fullmatch(r"time estimate: [\d.]+ s per epoch; 4 epochs ≈ \d+ s, plus validation \(timed at the "
                        r"first one\)", lines[0])
    assert re.fullmatch(r"time estimate: [\d.]+ s per epoch; 4 epochs ≈ \d+ s, plus 2 validations of [\d.]+ s",
                        lines[1])


def test_optional_callbacks_are_left_out_when_off():
    assert early_stopping("val/ndcg@20", None) is None and progress_bar(False) is None
    assert isinstance(progress_bar(True), StepProgressBar)
    stop = early_stopping("val/ndcg@20", 3)
    assert stop.patience == 3 and stop.monitor == "val/ndcg@20" and stop.mode == "max"
