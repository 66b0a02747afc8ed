"""A tuning study's workers: each draws trials from the shared storage until the study's budget of
finished (completed or pruned) trials is met; a trial is one bench run, stopped early when the pruner
says its validation curve cannot catch up."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L

from bench.errors import ConfigError
from bench.tune import Search, suggest

log = logging.getLogger(__name__)


class PruneOnValidation(L.Callback):
    """Reports each validation's ``monitor`` to the trial; when the pruner says stop, the run ends
    there (a shortened, completed run: its best checkpoint is tested as usual) and is marked pruned."""

    def __init__(self, trial: Any, monitor: str) -> None:
        self.trial, self.monitor = trial, monitor
        self.pruned_at: int | None = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.monitor not in trainer.callback_metrics:
            return
        value = float(trainer.callback_metrics[self.monitor])
        epoch = int(trainer.current_epoch)
        self.trial.report(value, step=epoch)
        if self.trial.should_prune():
            self.pruned_at = epoch
            trainer.should_stop = True


def storage(url: str, stale_after_s: int = 60) -> Any:
    """Optuna storage for ``url``: ``journal:<file>`` (Optuna's journal file: many processes on a
    shared filesystem), else an RDB URL (``sqlite:///x.db`` by default; a server's URL on a cluster).
    Workers send heartbeats, so a trial whose worker was killed is failed ``stale_after_s`` seconds
    after its last beat and retried once (its setting drawn again by the next worker)."""
    import optuna
    from optuna.storages import RetryFailedTrialCallback

    retry = RetryFailedTrialCallback(max_retry=1)
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = Path(url.removeprefix("journal:"))
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))  # heartbeats need an RDB; a journal has none
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    beat = max(1, stale_after_s // 3)
    return optuna.storages.RDBStorage(url, heartbeat_interval=beat, grace_period=stale_after_s,
                                      failed_trial_callback=retry)


def sampler(search: Search, seed: int) -> Any:
    import optuna

    if search.sampler == "grid":
        return optuna.samplers.GridSampler(search.grid(), seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def pruner(name: str, search: Search, epochs: int) -> Any:
    """``median``: a trial whose validation value is below the median of earlier trials' at the same
    epoch stops, but only after a quarter of its epochs (early curves cross: a fast learning rate can
    start behind) and once a quarter of the budget, at least 4 trials, has run in full."""
    import optuna

    if name == "none":
        return optuna.pruners.NopPruner()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=max(4, search.n_trials // 4),
                                           n_warmup_steps=max(1, epochs // 4))
    raise ConfigError(f"--pruner {name}: use median or none")


def objective(overrides: Sequence[str], search: Search, root: Path) -> Any:
    from bench.composition import compose
    from bench.run import train_and_test

    def run_trial(trial: Any) -> float:
        import optuna

        chosen = suggest(trial, search)
        folder = root / f"trial-{trial.number}"
        trial_overrides = [*overrides, *chosen]
        cfg = compose([*trial_overrides, f"output_dir={folder}"])
        monitor = f"val/{cfg.train.monitor}"
        watch = PruneOnValidation(trial, monitor)
        result = train_and_test(cfg, overrides=trial_overrides, extra_callbacks=[watch])
        value = float((result.best.get("val") or {}).get(str(cfg.train.monitor), math.nan))
        trial.set_user_attr("run", str(folder))
        trial.set_user_attr("worker", os.getpid())
        trial.set_user_attr("epochs", int(result.epochs_trained or 0))
        if watch.pruned_at is not None:
            raise optuna.TrialPruned(f"pruned after epoch {watch.pruned_at}")
        return value

    return run_trial


def work(study_name: str, url: str, search: Search, overrides: Sequence[str], seed: int, pruner_name: str,
         root: Path, stale_after_s: int = 60, epochs: int = 200) -> Any:
    """Draw and run trials until the study has ``search.n_trials`` finished ones; the study."""
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    study = optuna.create_study(study_name=study_name, storage=storage(url, stale_after_s),
                                sampler=sampler(search, seed),
                                pruner=pruner(pruner_name, search, epochs), direction="maximize", load_if_exists=True)
    enough = MaxTrialsCallback(search.n_trials, states=(TrialState.COMPLETE, TrialState.PRUNED))
    if _finished(study) < search.n_trials:
        study.optimize(objective(overrides, search, root), callbacks=[enough], catch=())
    return study


def _finished(study: Any) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def spawn_workers(argv: Sequence[str], n: int) -> list[subprocess.Popen]:
    """``n`` more worker processes of the same command, each with cores / (n + 1) threads."""
    threads = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
                  // (n + 1))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "BENCH_TUNE_WORKER": "1"}
    return [subprocess.Popen([sys.executable, "-m", "bench.tune", *argv], env=env) for _ in range(n)]
