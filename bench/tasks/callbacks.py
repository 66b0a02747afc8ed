"""Training-loop callbacks shared by every task."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L


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
