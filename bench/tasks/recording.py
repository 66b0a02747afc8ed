"""Lightning callbacks that complete a run's results (listed in ``conf/callbacks/``).

:class:`WriteResults` turns the ``running`` record that :func:`bench.run.train_and_test`
writes at the start into the ``completed`` one when testing ends, from the one
:class:`~bench.records.outcome.TestOutcome` the tested module hands it (``test_outcome()``);
:class:`WandbRunSummary` then copies the test metrics into the W&B run and finishes it. Under
DDP only rank 0 writes.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger

from bench.determinism import digits_record
from bench.records.io import write_per_user
from bench.records.outcome import TestOutcome
from bench.records.provenance import hardware_info, host_info, now_iso
from bench.records.schema import COMPLETED, PER_USER_FILE, RunResult


class WriteResults(L.Callback):
    """Complete ``results.json`` and write ``per_user_test.npz`` when testing ends.

    Args:
        dirpath: the run's output directory (holding the ``running`` record).
        monitor: the validation metric of the best checkpoint (``ndcg@20``).
    """

    def __init__(self, dirpath: str | Path, monitor: str) -> None:
        self.dirpath = Path(dirpath)
        self.monitor = f"val/{monitor}"
        self._t: dict[str, float] = {}
        self._fit_before = 0.0  # fit seconds of the parts before a resume, from the checkpoint
        self.timing: dict[str, float] = {}

    def _fit_seconds(self) -> float:
        start = self._t.get("fit")
        return self._fit_before + (time.perf_counter() - start if start is not None else 0.0)

    # the fit time so far travels in every checkpoint, so a resumed run adds to it (the part of
    # a killed epoch that is trained again is not counted twice)
    def state_dict(self) -> dict[str, Any]:
        return {"fit_s": self.timing.get("fit", self._fit_seconds())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._fit_before = float(state_dict.get("fit_s", 0.0))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t["fit"] = time.perf_counter()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.timing["fit"] = self._fit_seconds()
        self._t.pop("fit", None)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t["test"] = time.perf_counter()

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.timing["test"] = time.perf_counter() - self._t.pop("test", time.perf_counter())
        if not trainer.is_global_zero:
            return
        outcome = getattr(pl_module, "test_outcome", lambda: None)()
        if not isinstance(outcome, TestOutcome):
            raise TypeError("WriteResults needs a tested module whose test_outcome() returns a TestOutcome")
        self.write(outcome, trainer)

    def write(self, outcome: TestOutcome, trainer: L.Trainer) -> None:
        """Complete the folder's record with ``outcome`` (and the trainer's best checkpoint and epoch)."""
        result = RunResult.read_or_new(self.dirpath)
        history = outcome.history
        # the first maximum, as the checkpoint callback keeps it
        best_row = max(history, key=lambda row: row[self.monitor]) if history else {}
        checkpoint = trainer.checkpoint_callback
        best_path = checkpoint.best_model_path if isinstance(checkpoint, ModelCheckpoint) else None
        if best_path and Path(best_path).resolve().is_relative_to(self.dirpath.resolve()):
            best_path = str(Path(best_path).resolve().relative_to(self.dirpath.resolve()))  # the folder may move
        finished = now_iso()
        timing = {**result.timing_s, **self.timing}
        # the median: neither the first epoch's warm-up nor the epochs that also validate move it
        if outcome.train_epoch_seconds:
            timing["train_epoch_median"] = statistics.median(outcome.train_epoch_seconds)
        if result.started_at:
            elapsed = datetime.fromisoformat(finished) - datetime.fromisoformat(result.started_at)
            timing["total"] = elapsed.total_seconds()
        write_per_user(self.dirpath / PER_USER_FILE, outcome.users, outcome.per_user)
        result.status, result.error, result.traceback = COMPLETED, None, None
        result.best = {"epoch": best_row.get("epoch"), "checkpoint": best_path,
                       "val": {k[4:]: v for k, v in best_row.items() if k.startswith("val/")}}
        result.test = dict(outcome.means)
        result.ties = dict(outcome.ties)
        result.per_edge = dict(outcome.per_edge)
        result.sampled = dict(outcome.sampled)
        result.history = list(history)
        result.epochs_trained = trainer.current_epoch
        result.per_user_test = PER_USER_FILE
        result.timing_s = timing
        result.device = outcome.device
        result.host = host_info()
        gpu = outcome.device if not outcome.device.startswith("cpu") else None
        result.provenance = {**result.provenance, "hardware": hardware_info(gpu), "digits": digits_record(gpu)}
        result.finished_at = finished
        result.write(self.dirpath)


class WandbRunSummary(L.Callback):
    """Put the test metrics, the best epoch and the per-user file into each W&B run when
    testing ends, then finish it (so that the next job of a sweep opens its own run).
    Runs after :class:`WriteResults` (it reads the completed record); a no-op without a
    W&B logger."""

    def __init__(self, dirpath: str | Path) -> None:
        self.dirpath = Path(dirpath)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if not loggers or not trainer.is_global_zero:
            return
        result = RunResult.read(self.dirpath)
        for lg in loggers:
            lg.experiment.summary.update({f"test/{k}": v for k, v in result.test.items()})
            lg.experiment.summary.update({"best_epoch": result.best.get("epoch"), "status": result.status})
            # per-user vectors, for `bench.report --wandb`'s paired per-user tests
            lg.experiment.save(str(self.dirpath / PER_USER_FILE), base_path=str(self.dirpath), policy="now")
            lg.experiment.finish()
