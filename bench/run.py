"""One run: config -> data -> model -> loss -> train -> full-ranking test -> results.json."""

from __future__ import annotations

import logging
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from bench.errors import BenchError, ConfigError
from bench.evaluation import METRICS, mean_metrics
from bench.loggers import build_loggers
from bench.parallel import place_current_job
from bench.results import PER_USER_FILE, RESULTS_FILE, atomic_write_bytes, read_json, write_json, write_per_user
from bench.tasks.callbacks import LastCheckpoint, ValidateOnLastEpoch
from bench.models import MODELS
from bench.tasks.cf import CFModule

log = logging.getLogger(__name__)

RUN_CONFIG_FILE = "run_config.yaml"
CHECKPOINT_DIR = "checkpoints"


def format_metrics_table(means: dict[str, float], ks: Sequence[int]) -> str:
    """A plain-text table, rows = K, columns = metrics."""
    header = f"{'K':>5} " + " ".join(f"{m:>10}" for m in METRICS)
    rows = [header]
    for k in ks:
        rows.append(f"{k:>5} " + " ".join(f"{means.get(f'{m}@{k}', float('nan')):>10.4f}" for m in METRICS))
    return "\n".join(rows)


def _check_monitor(cfg: DictConfig) -> None:
    metric, _, k = str(cfg.train.monitor).partition("@")
    if metric not in METRICS or not k.isdigit() or int(k) not in set(cfg.eval.ks):
        raise ConfigError(f"train.monitor={cfg.train.monitor} is not a computed metric; use one of "
                          f"{'/'.join(METRICS)} at a K in eval.ks={list(cfg.eval.ks)}")


def _callbacks(cfg: DictConfig, ckpt_dir: Path) -> tuple[list[Callback], ModelCheckpoint]:
    _check_monitor(cfg)
    monitor = f"val/{cfg.train.monitor}"
    best = ModelCheckpoint(dirpath=ckpt_dir, filename="best", monitor=monitor, mode="max", save_top_k=1,
                           auto_insert_metric_name=False, enable_version_counter=False)
    callbacks: list[Callback] = [ValidateOnLastEpoch(), best, LastCheckpoint(ckpt_dir)]
    if cfg.train.get("early_stopping_patience"):
        callbacks.append(EarlyStopping(monitor=monitor, mode="max", patience=int(cfg.train.early_stopping_patience),
                                       check_on_train_epoch_end=False))
    return callbacks, best


def _versions() -> dict[str, str]:
    import hydra
    import lightning

    return {"python": platform.python_version(), "torch": torch.__version__, "lightning": lightning.__version__,
            "hydra": hydra.__version__}


def train_and_test(cfg: DictConfig, overrides: Sequence[str] = (), extra_callbacks: Sequence[Callback] = (),
                   resume_checkpoint: str | Path | None = None) -> dict[str, Any]:
    """Train and test one configuration; write ``results.json`` in ``cfg.output_dir``.

    Args:
        cfg: the composed config (see ``conf/config.yaml``).
        overrides: the command-line overrides that made this run (recorded).
        extra_callbacks: more Lightning callbacks (tests use this to interrupt a run).
        resume_checkpoint: a ``last.ckpt`` to continue from.
    Returns:
        the results dict that was written.
    """
    t_start = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    place_current_job(cfg)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    if resume_checkpoint is None and rank_zero_only.rank == 0:  # DDP: ranks > 0 write nothing of their own
        atomic_write_bytes(out / RUN_CONFIG_FILE, OmegaConf.to_yaml(resolved).encode())
        write_json(out / RESULTS_FILE, {"status": "running", "overrides": list(overrides), "config": resolved})
    seed = int(cfg.seed)
    L.seed_everything(seed, workers=True, verbose=False)

    t0 = time.perf_counter()
    data = instantiate(cfg.dataset).load()
    task = instantiate(cfg.task)
    model_cls = MODELS.get(cfg.model.name)
    if task.name not in getattr(model_cls, "tasks", ()):
        fitting = [m for m in MODELS.names() if task.name in getattr(MODELS.get(m), "tasks", ())]
        raise ConfigError(f"model={cfg.model.name} does not fit task={task.name}; models for this task: "
                          f"{', '.join(fitting)}")
    datamodule = task.datamodule(data, seed=seed, batch_size=int(cfg.train.batch_size), ks=tuple(cfg.eval.ks),
                                 max_scores=int(cfg.eval.max_scores))
    splits = datamodule.splits
    log.info("data %s: %d users, %d items, %d train / %d valid / %d test interactions", splits.name,
             splits.n_users, splits.n_items, splits.train.nnz, splits.valid.nnz, splits.test.nnz)
    for split, ev in (("validation", datamodule.val_evaluator), ("test", datamodule.test_evaluator)):
        if ev.n_skipped:
            log.info("%d users have no %s items and are excluded from %s averages", ev.n_skipped, split, split)
    t_data = time.perf_counter() - t0

    model = instantiate(cfg.model, n_users=splits.n_users, n_items=splits.n_items)
    loss = instantiate(cfg.loss)
    module = CFModule(model, loss, instantiate(cfg.optimizer), datamodule, seed)

    ckpt_dir = out / CHECKPOINT_DIR
    callbacks, best_ckpt = _callbacks(cfg, ckpt_dir)
    logger_cfg = cfg.get("logger")
    if resume_checkpoint and logger_cfg and logger_cfg.get("csv"):
        logger_cfg = OmegaConf.merge(logger_cfg, {"csv": {"version": "resumed"}})  # keep the first part's log
    loggers = build_loggers(logger_cfg)
    trainer = instantiate(cfg.trainer, callbacks=callbacks + list(extra_callbacks), logger=loggers or False,
                          default_root_dir=str(out))
    for lg in loggers:
        lg.log_hyperparams(resolved)

    t0 = time.perf_counter()
    trainer.fit(module, datamodule=datamodule, ckpt_path=str(resume_checkpoint) if resume_checkpoint else None)
    t_fit = time.perf_counter() - t0

    best_path = best_ckpt.best_model_path
    if not best_path:
        raise BenchError("no validation ran, so there is no best checkpoint to test; set trainer.max_epochs >= 1")
    t0 = time.perf_counter()
    trainer.test(module, datamodule=datamodule, ckpt_path=best_path, verbose=False)
    t_test = time.perf_counter() - t0

    test_means = mean_metrics(module.test_per_user)
    monitor = f"val/{cfg.train.monitor}"
    history = module.history
    best_row = max(history, key=lambda row: row[monitor]) if history else {}  # first maximum, as the checkpoint
    previous = read_json(out / RESULTS_FILE) if (out / RESULTS_FILE).exists() else {}
    results = {
        "status": "completed",
        "overrides": list(overrides) or previous.get("overrides", []),
        "config": resolved,
        "data": {**splits.summary(), "val_users": int(datamodule.val_evaluator.users.numel()),
                 "test_users": int(datamodule.test_evaluator.users.numel()),
                 "val_users_skipped": datamodule.val_evaluator.n_skipped,
                 "test_users_skipped": datamodule.test_evaluator.n_skipped},
        "best": {"epoch": best_row.get("epoch"), "checkpoint": best_path,
                 "val": {k[4:]: v for k, v in best_row.items() if k.startswith("val/")}},
        "test": test_means,
        "history": history,
        "epochs_trained": trainer.current_epoch,
        "per_user_test": PER_USER_FILE,
        "timing_s": {"data": t_data, "fit": t_fit, "test": t_test, "total": time.perf_counter() - t_start},
        "resumed_from": str(resume_checkpoint) if resume_checkpoint else previous.get("resumed_from"),
        "device": str(module.device),
        "host": {"name": platform.node(), "pid": os.getpid(), "torch_threads": torch.get_num_threads()},
        "started_at": started_at,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "versions": _versions(),
    }
    if not trainer.is_global_zero:  # DDP: rank 0 writes the files
        return results
    write_per_user(out / PER_USER_FILE, module.test_users.numpy(),
                   {k: v.numpy() for k, v in module.test_per_user.items()})
    write_json(out / RESULTS_FILE, results)
    for lg in loggers:
        if type(lg).__name__ == "WandbLogger":
            # test metrics in the run summary; finish so the next job of a sweep opens its own run
            lg.experiment.summary.update({f"test/{k}": v for k, v in test_means.items()})
            lg.experiment.summary.update({"best_epoch": best_row.get("epoch"), "status": "completed"})
            # per-user vectors, for `bench.report --wandb`'s paired per-user tests
            lg.experiment.save(str(out / PER_USER_FILE), base_path=str(out), policy="now")
            lg.experiment.finish()
    return results
