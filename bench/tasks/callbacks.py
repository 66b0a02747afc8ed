"""Training-loop callbacks shared by every task (listed in ``conf/callbacks/``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, TQDMProgressBar


class ValidateOnLastEpoch(L.Callback):
    """Also validate after the final epoch when it is not a multiple of the interval.

    Without this, a run shorter than ``check_val_every_n_epoch`` never validates, saves
    no best checkpoint, and cannot be tested (a crash in the SL@K reference code).
    """

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.max_epochs is not None and trainer.current_epoch == trainer.max_epochs - 1:
            trainer.check_val_every_n_epoch = 1


class LastCheckpoint(L.Callback):
    """Write ``last.ckpt`` after every training epoch, atomically.

    Lightning's ModelCheckpoint writes ``last`` only together with a top-k save, i.e.
    only on validation epochs; resuming needs every epoch. The file is written beside
    and renamed, so a kill during the write leaves the previous checkpoint intact.
    """

    def __init__(self, dirpath: str | Path, filename: str = "last.ckpt") -> None:
        self.path = Path(dirpath) / filename

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        trainer.save_checkpoint(tmp, weights_only=False)  # optimizer and loop state too: resumable
        if trainer.is_global_zero:
            os.replace(tmp, self.path)


def early_stopping(monitor: str, patience: int | None) -> EarlyStopping | None:
    """Stop after ``patience`` validation rounds without improvement of ``monitor``
    (maximised); None (no callback) when ``patience`` is not set."""
    if not patience:
        return None
    return EarlyStopping(monitor=monitor, mode="max", patience=int(patience), check_on_train_epoch_end=False)


def output_is_terminal() -> bool:
    """Whether the run's output goes to a terminal (a progress bar helps there, not in logs)."""
    return sys.stderr.isatty()


class StepProgressBar(TQDMProgressBar):
    """Lightning's bar (it/s) with the step's training loss (``loss``, kept off the loggers)."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        step_loss = getattr(pl_module, "step_loss", None)
        if step_loss is not None:
            metrics["loss"] = f"{float(step_loss):.4f}"
        return metrics


def progress_bar(enabled: bool | None) -> StepProgressBar | None:
    """The progress bar when ``enabled`` (the trainer's ``enable_progress_bar``), else None."""
    return StepProgressBar() if enabled else None
