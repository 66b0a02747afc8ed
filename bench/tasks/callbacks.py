"""Training-loop callbacks shared by every task (listed in ``conf/callbacks/``)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Checkpoint, EarlyStopping, ModelCheckpoint, TQDMProgressBar

from bench.console import duration

log = logging.getLogger(__name__)


class ValidateOnLastEpoch(L.Callback):
    """Also validate after the final epoch when it is not a multiple of the interval.

    Without this, a run shorter than ``check_val_every_n_epoch`` never validates, saves
    no best checkpoint, and cannot be tested (a crash in the SL@K reference code).
    """

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.max_epochs is not None and trainer.current_epoch == trainer.max_epochs - 1:
            # the configured interval stays readable (the time estimate counts validations with it)
            trainer.configured_val_interval = getattr(trainer, "configured_val_interval",  # type: ignore[attr-defined]
                                                      trainer.check_val_every_n_epoch)
            trainer.check_val_every_n_epoch = 1


class BestCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint, following its run folder.

    Restored from a checkpoint written in another folder (the run was moved or copied), its
    paths are rebased onto this folder, so the best score and epoch carry over and nothing is
    read from, written to or deleted in the other folder (Lightning would drop the best score
    and keep pointing at the old ``best.ckpt``).
    """

    @property
    def state_key(self) -> str:  # the key ModelCheckpoint uses, so either class restores the other's state
        return "ModelCheckpoint" + super().state_key[len(type(self).__qualname__):]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old = state_dict.get("dirpath")
        if old and self.dirpath and os.path.realpath(old) != os.path.realpath(self.dirpath):
            here = Path(self.dirpath)

            def rebase(path: str | None) -> str | None:
                return str(here / Path(path).name) if path else path

            state_dict = {**state_dict, "dirpath": self.dirpath,
                          **{k: rebase(state_dict.get(k)) for k in ("best_model_path", "kth_best_model_path",
                                                                     "last_model_path")},
                          "best_k_models": {rebase(k): v for k, v in (state_dict.get("best_k_models") or {}).items()}}
        super().load_state_dict(state_dict)


class LastCheckpoint(Checkpoint):
    """Write ``last.ckpt`` after every training epoch, atomically.

    Lightning's ModelCheckpoint writes ``last`` only together with a top-k save, i.e.
    only on validation epochs; resuming needs every epoch. The file is written beside
    and renamed, so a kill during the write leaves the previous checkpoint intact.

    A ``Checkpoint`` so that Lightning calls it after the other callbacks, the best checkpoint
    listed before it included: when validation runs every epoch (and on the last epoch, see
    :class:`ValidateOnLastEpoch`) ModelCheckpoint saves at the end of the training epoch, and
    written before that, ``last.ckpt`` would hold the best score of the validation before, so a
    resumed run could replace the best model by a worse one.
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


class Heartbeat(L.Callback):
    """Without a progress bar (output to a file or a pipe), a line every ``every_s`` seconds inside a
    long epoch: where it is and how long the epoch has left, so a log is never silent for minutes.

    Args:
        every_s: seconds between lines within one epoch (the epoch's own line ends it).
    """

    def __init__(self, every_s: float = 30.0) -> None:
        self.every_s = float(every_s)
        self._start = self._last = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = self._last = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        now = time.perf_counter()
        if now - self._last < self.every_s:
            return
        self._last = now
        done, total = batch_idx + 1, int(trainer.num_training_batches)
        left = (now - self._start) / done * max(0, total - done)
        log.info("epoch %d: step %d of %d (%.0f%%), about %s left in the epoch", trainer.current_epoch, done, total,
                 100 * done / max(1, total), duration(left))


def heartbeat(enabled: bool, every_s: float = 30.0) -> Heartbeat | None:
    """A :class:`Heartbeat` when there is no progress bar (``enabled``), else None."""
    return Heartbeat(every_s) if enabled else None


def sweep_shape() -> tuple[int, int, int] | None:
    """(jobs, jobs at a time, jobs of this job's configuration, i.e. its seeds) of the Hydra multirun
    this process is a job of, from the sweep's ``multirun.yaml`` (comma-separated sweeps; ranges and
    other sweep functions count as one value each); None outside a multirun."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
        from omegaconf import OmegaConf

        if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
            return None
        hc = HydraConfig.get()
        saved = OmegaConf.load(Path(hc.sweep.dir) / "multirun.yaml")
        jobs = seeds = 1
        for override in saved.hydra.overrides.task:
            key, _, value = str(override).partition("=")
            n = 1 if "(" in value else len(value.split(","))
            jobs *= n
            seeds *= n if key.lstrip("+") == "seed" else 1
        n_jobs = int(hc.launcher.get("n_jobs") or 1) if "n_jobs" in hc.launcher else 1
        return jobs, max(1, n_jobs), seeds
    except Exception:  # an estimate must never stop a run
        return None


class TimeEstimate(L.Callback):
    """Log the expected time per epoch and per run after the first ``after_batches`` steps (and
    per sweep inside a multirun), then again once the first validation has been timed, so that
    nobody starts a 20-hour run by accident.

    The first estimate scales the first steps to an epoch, and they include the warm-up (on
    Gowalla it read 52 s for 36 s epochs); the second takes the epochs timed by then (their
    training part, validation apart), leaving out the first when there are later ones.

    Args:
        after_batches: training steps timed before the first estimate.
    """

    def __init__(self, after_batches: int = 20) -> None:
        self.after_batches = max(1, int(after_batches))
        self._epoch_start = 0.0
        self._val_start = 0.0
        self._trained: float | None = None  # the current epoch's training part, once validation starts
        self.per_batch: float | None = None
        self.validation: float | None = None
        self.epochs: list[float] = []  # seconds of each finished epoch's training part
        self.start_epoch: int | None = None  # > 0 for a run resumed from a checkpoint
        self._done = False

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_start = time.perf_counter()
        self._trained = None
        if self.start_epoch is None:
            self.start_epoch = int(getattr(trainer, "current_epoch", 0) or 0)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        n_batches = trainer.num_training_batches
        if self.per_batch is None and batch_idx + 1 == min(self.after_batches, int(n_batches)):
            self.per_batch = (time.perf_counter() - self._epoch_start) / (batch_idx + 1)
            self._report(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_start = time.perf_counter()
        if not trainer.sanity_checking and self._trained is None:
            self._trained = self._val_start - self._epoch_start

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.validation is not None:
            return
        self.validation = time.perf_counter() - self._val_start
        self._report(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning validates before this hook: an epoch's time is its training part
        self.epochs.append(self._trained if self._trained is not None else time.perf_counter() - self._epoch_start)
        self._trained = None

    def timed_epochs(self) -> list[float]:
        """Training seconds of the epochs timed so far, the current one's once it is validating,
        without the first (warm-up) when there are later ones."""
        timed = self.epochs + ([self._trained] if self._trained is not None else [])
        return timed[1:] or timed

    def epoch_seconds(self, n_batches: float) -> float:
        """Expected seconds of one epoch's training: the mean of :meth:`timed_epochs`, else the
        first steps scaled to ``n_batches``."""
        timed = self.timed_epochs()
        return sum(timed) / len(timed) if timed else (self.per_batch or 0.0) * n_batches

    def _report(self, trainer: L.Trainer) -> None:
        if self.per_batch is None or self._done:
            return
        epoch = self.epoch_seconds(float(trainer.num_training_batches))
        epochs = max(0, int(trainer.max_epochs or 0))  # the whole run, resumed ones included
        every = int(getattr(trainer, "configured_val_interval", None) or trainer.check_val_every_n_epoch or 1)
        rounds = epochs // every + (1 if epochs % every else 0)
        total = epoch * epochs + (self.validation or 0.0) * rounds
        validation = (f", plus {rounds} validation{'s' if rounds != 1 else ''} of {self.validation:.2f} s"
                      if self.validation is not None
                      else ", plus validation (timed at the first one)")
        timed = len(self.timed_epochs())
        basis = f" (mean of {timed} timed epoch{'s' if timed > 1 else ''})" if timed else ""
        line = (f"time estimate: {epoch:.1f} s per epoch{basis}; {epochs} epoch{'s' if epochs != 1 else ''} ≈ "
                f"{duration(total)}{validation}")
        start = min(self.start_epoch or 0, epochs)
        if start:  # a resumed run: what is left is what its user waits for
            left = epoch * (epochs - start) + (self.validation or 0.0) * (rounds - start // every)
            line += f"; resumed at epoch {start}, the {epochs - start} left ≈ {duration(left)}"
        shape = sweep_shape()
        if shape is not None:  # only this configuration's seeds cost what this job does
            jobs, at_once, seeds = shape
            line += f"; its {seeds} seed{'s' if seeds != 1 else ''}, {at_once} at a time ≈ " \
                    f"{duration(total * -(-seeds // at_once))}"
            others = jobs // seeds - 1
            if others:
                line += (" (the sweep's other configuration says its own as it starts)" if others == 1 else
                         f" (the sweep's {others} other configurations say theirs as they start)")
        log.info("%s", line)
        self._done = self.validation is not None
