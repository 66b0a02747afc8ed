"""Lightning callbacks that complete a run's results (listed in ``conf/callbacks/``).

:class:`WriteResults` turns the ``running`` record that :func:`bench.run.train_and_test`
writes at the start into the ``completed`` one when testing ends; :class:`WandbRunSummary`
then copies the test metrics into the W&B run and finishes it. Under DDP only rank 0
writes.
"""

from __future__ import annotations

import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger

from bench.evaluation import mean_metrics
from bench.results.io import write_per_user
from bench.results.schema import COMPLETED, PER_USER_FILE, RunResult
from bench.tasks.module import RankingModule


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def host_info() -> dict[str, object]:
    """Where this process runs: the machine, its pid (the run lock's owner) and torch's CPU threads."""
    return {"name": platform.node(), "pid": os.getpid(), "torch_threads": torch.get_num_threads()}


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
        self.timing: dict[str, float] = {}

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t["fit"] = time.perf_counter()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.timing["fit"] = time.perf_counter() - self._t.pop("fit", time.perf_counter())

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t["test"] = time.perf_counter()

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.timing["test"] = time.perf_counter() - self._t.pop("test", time.perf_counter())
        if not trainer.is_global_zero:
            return
        if not isinstance(pl_module, RankingModule) or pl_module.test_users is None:
            raise TypeError("WriteResults needs a tested RankingModule")
        result = RunResult.read_or_new(self.dirpath)
        history = pl_module.history
        # the first maximum, as the checkpoint callback keeps it
        best_row = max(history, key=lambda row: row[self.monitor]) if history else {}
        checkpoint = trainer.checkpoint_callback
        best_path = checkpoint.best_model_path if isinstance(checkpoint, ModelCheckpoint) else None
        if best_path and Path(best_path).resolve().is_relative_to(self.dirpath.resolve()):
            best_path = str(Path(best_path).resolve().relative_to(self.dirpath.resolve()))  # the folder may move
        finished = now_iso()
        timing = {**result.timing_s, **self.timing}
        if result.started_at:
            elapsed = datetime.fromisoformat(finished) - datetime.fromisoformat(result.started_at)
            timing["total"] = elapsed.total_seconds()
        write_per_user(self.dirpath / PER_USER_FILE, pl_module.test_users.numpy(),
                       {k: v.numpy() for k, v in pl_module.test_per_user.items()})
        result.status, result.error, result.traceback = COMPLETED, None, None
        result.best = {"epoch": best_row.get("epoch"), "checkpoint": best_path,
                       "val": {k[4:]: v for k, v in best_row.items() if k.startswith("val/")}}
        result.test = mean_metrics(pl_module.test_per_user)
        result.history = list(history)
        result.epochs_trained = trainer.current_epoch
        result.per_user_test = PER_USER_FILE
        result.timing_s = timing
        result.device = str(pl_module.device)
        result.host = host_info()
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
