"""Lightning callbacks that complete a run's results (listed in ``conf/callbacks/``).

:class:`WriteResults` turns the ``running`` record that :func:`bench.run.train_and_test`
writes at the start into the ``completed`` one when testing ends; :class:`WandbRunSummary`
then copies the test metrics into the W&B run and finishes it. Under DDP only rank 0
writes. :func:`code_version`, :func:`hardware_info` and :func:`host_info` describe where a run
ran (``results.json``'s ``provenance`` and ``host``).
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger

from bench.determinism import digits_record
from bench.evaluation import mean_metrics
from bench.results.io import write_per_user
from bench.results.schema import COMPLETED, PER_USER_FILE, RunResult
from bench.tasks.module import RankingModule


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def host_info() -> dict[str, object]:
    """Where this process runs: the machine, its pid (the run lock's owner) and torch's CPU threads."""
    return {"name": platform.node(), "pid": os.getpid(), "torch_threads": torch.get_num_threads()}


#: the folder holding the ``bench`` package: the root of a checkout, or ``site-packages`` of an install
CODE_ROOT = Path(__file__).resolve().parents[2]
GIT_TIMEOUT_S = 5.0
NOT_A_REPOSITORY = "not a repository"


def _git(root: Path, *args: str) -> str:
    # no optional locks: the jobs of a sweep ask at once, and a user may be running git meanwhile
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                          env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"}, check=True)
    return done.stdout


def code_version() -> dict[str, Any]:
    """The code that runs: ``{"commit": HEAD's sha, "dirty": uncommitted changes (untracked
    files included)}`` of the git checkout whose root holds the ``bench`` package.

    Anything else (no git, not a repository, an installed copy, even one inside some other
    repository) gives ``{"commit": None, "dirty": None, "note": "not a repository"}``.
    """
    root = CODE_ROOT
    try:
        top, commit = _git(root, "rev-parse", "--show-toplevel", "HEAD").splitlines()
        if Path(top).resolve() != root.resolve():
            return {"commit": None, "dirty": None, "note": NOT_A_REPOSITORY}
    except (OSError, ValueError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "note": NOT_A_REPOSITORY}
    try:
        dirty = bool(_git(root, "status", "--porcelain").strip())
    except (OSError, subprocess.SubprocessError) as exc:
        return {"commit": commit, "dirty": None, "note": f"git status failed: {type(exc).__name__}"}
    return {"commit": commit, "dirty": dirty}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (AttributeError, ValueError, OSError):  # not a POSIX system that tells
        return None


def hardware_info(device: torch.device | str | None = None) -> dict[str, Any]:
    """The machine: CPU model, logical CPUs, total memory (GiB) and the GPU's name when
    ``device`` is a CUDA device (None for a run on the CPU)."""
    dev = torch.device(device) if device is not None else None
    gpu = torch.cuda.get_device_name(dev) if dev is not None and dev.type == "cuda" and torch.cuda.is_available() \
        else None
    return {"cpu": _cpu_model(), "cpu_count": os.cpu_count(), "gpu": gpu, "memory_gb": _memory_gb()}


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
        # the median: neither the first epoch's warm-up nor the epochs that also validate move it
        if pl_module.train_epoch_seconds:
            timing["train_epoch_median"] = statistics.median(pl_module.train_epoch_seconds)
        if result.started_at:
            elapsed = datetime.fromisoformat(finished) - datetime.fromisoformat(result.started_at)
            timing["total"] = elapsed.total_seconds()
        write_per_user(self.dirpath / PER_USER_FILE, pl_module.test_users.numpy(),
                       {k: v.numpy() for k, v in pl_module.test_per_user.items()})
        result.status, result.error, result.traceback = COMPLETED, None, None
        result.best = {"epoch": best_row.get("epoch"), "checkpoint": best_path,
                       "val": {k[4:]: v for k, v in best_row.items() if k.startswith("val/")}}
        result.test = mean_metrics(pl_module.test_per_user)
        result.ties = dict(pl_module.test_ties)
        result.per_edge = dict(pl_module.test_per_edge)
        result.sampled = dict(pl_module.test_sampled)
        result.history = list(history)
        result.epochs_trained = trainer.current_epoch
        result.per_user_test = PER_USER_FILE
        result.timing_s = timing
        result.device = str(pl_module.device)
        result.host = host_info()
        device = str(pl_module.device) if pl_module.device.type != "cpu" else None
        result.provenance = {**result.provenance, "hardware": hardware_info(pl_module.device),
                             "digits": digits_record(device)}
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
