"""A run's training and test, once :func:`bench.run.train_and_test` has made the folder the
run's: the record's provenance, the data, the task's Lightning module, the trainer, fit and test.
Everything Lightning-bound lives here (importing Lightning takes seconds, which a refused command
should not pay)."""

from __future__ import annotations

import logging
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

import bench.resolvers  # noqa: F401  (the ${bench_...:} resolvers the config uses)
from bench.console import reapply as reapply_console
from bench.datasets.noise import check_noise, load_dataset
from bench.datasets.provenance import recording as recording_data_files
from bench.determinism import digits_record, run_device
from bench.errors import BenchError, ConfigError, DataError, find_user_error
from bench.evaluation.sampled import check_sampled
from bench.loggers import build_loggers
from bench.models import MODELS
from bench.parallel import cpu_count, others_running, oversubscription
from bench.records import RUN_CONFIG_FILE, RUNNING, RunResult, atomic_write_bytes
from bench.records.identity import data_identity, short
from bench.records.io import load_checkpoint
from bench.records.provenance import code_version, hardware_info, host_info, now_iso
from bench.records.schema import SWEEP_ID_ENV
from bench.tasks.datamodule import RankingDataModule
from bench.tasks.ltr import LtrDataModule, LtrModule
from bench.tasks.module import RankingModule

log = logging.getLogger(__name__)
reapply_console()  # Lightning's import has just set its loggers to INFO


def build_callbacks(cfg: DictConfig) -> list[Callback]:
    """The callbacks of ``cfg.callbacks`` in order; entries that are null or build to None
    are left out."""
    out = []
    for name, spec in (cfg.get("callbacks") or {}).items():
        if spec is None:
            continue
        callback = instantiate(spec)
        if callback is not None:
            if not isinstance(callback, Callback):
                raise ConfigError(f"callbacks.{name} built a {type(callback).__name__}, not a Lightning Callback")
            out.append(callback)
    return out


#: libraries whose version is recorded when installed (read from their metadata, without importing them)
RECORDED_LIBRARIES = ("numpy", "scipy", "pandas", "torch_geometric")


def _versions() -> dict[str, str]:
    from importlib import metadata

    import hydra

    out = {"python": platform.python_version(), "torch": torch.__version__, "lightning": L.__version__,
           "hydra": hydra.__version__}
    for name in RECORDED_LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _check_same_data(before: dict[str, str] | None, now: dict[str, str], out: Path) -> None:
    """A resumed run must read the data its first part read (the same contents, as the report compares them)."""
    if before is None or not isinstance(before, dict) or set(before.values()) == set(now.values()):
        return
    changed = next(f for f in sorted(set(before) | set(now)) if before.get(f) != now.get(f))
    raise DataError(f"cannot resume {out}: the data changed since the run started ({changed}: sha256 "
                    f"{str(before.get(changed, 'none'))[:12]} then, {str(now.get(changed, 'none'))[:12]} now); restore "
                    "the data it started with, or start the run over in a new folder")


def _check_same_identity(before: str | None, now: str, out: Path) -> None:
    """A resumed run must train on the data its first part did (the same splits, not only files)."""
    if before and before != now:
        raise DataError(f"cannot resume {out}: its data changed since the run started (identity "
                        f"{short(before)} then, {short(now)} now); restore the data and settings it started with, or "
                        "start the run over in a new folder")


def _check_model_fits_task(model_name: str, task_name: str) -> None:
    model_cls = MODELS.get(model_name)
    if task_name not in getattr(model_cls, "tasks", ()):
        fitting = [m for m in MODELS.names() if task_name in getattr(MODELS.get(m), "tasks", ())]
        raise ConfigError(f"model={model_name} does not fit task={task_name}; models for this task: "
                          f"{', '.join(fitting)}")


def build_task(cfg: DictConfig) -> Any:
    """The task object of ``cfg.task`` (its ``recipe``, the task's defaults for other groups' keys such as
    ``eval.ks`` or ``train.negatives``, is read there, not by the task)."""
    spec = cast(dict, OmegaConf.to_container(cfg.task, resolve=True))
    return instantiate({k: v for k, v in spec.items() if k != "recipe"})


def build_datamodule(cfg: DictConfig, seed: int) -> RankingDataModule | LtrDataModule:
    """The task's data module for the configured data set."""
    # noise is a setting of the data, applied by the task to its training split only
    ratio, noise_seed = cfg.dataset.get("noise_ratio", 0.0), cfg.dataset.get("noise_seed", 0)
    check_noise(ratio, noise_seed)
    data = load_dataset(cfg.dataset)
    task = build_task(cfg)
    _check_model_fits_task(cfg.model.name, task.name)
    if ratio and task.name != "cf":
        raise ConfigError(f"dataset.noise_ratio={ratio} flips user-item pairs, which only task=cf has; "
                          f"set it to 0 for task={task.name}")
    extra = {"noise_ratio": ratio, "noise_seed": noise_seed} if ratio else {}
    sampled_seed = cfg.eval.get("sampled_seed", 0)
    sampled = check_sampled(cfg.eval.get("sampled_negatives"), sampled_seed)
    sampler = str(cfg.train.get("sampler", "uniform"))
    datamodule = task.datamodule(data, seed=seed, batch_size=int(cfg.train.batch_size), ks=tuple(cfg.eval.ks),
                                 max_scores=int(cfg.eval.max_scores), ties=str(cfg.eval.ties),
                                 test_masks_valid=bool(cfg.eval.get("test_masks_valid", True)),
                                 sampled_negatives=sampled, sampled_seed=int(sampled_seed),
                                 sampler=sampler, popularity_power=float(cfg.train.get("popularity_power", 1.0)),
                                 **extra)
    if sampler != "uniform" and not isinstance(datamodule, RankingDataModule):
        raise ConfigError(f"train.sampler={sampler} draws negative items; task={task.name} ranks given lists and "
                          "draws none: set it to uniform")
    if sampled and not isinstance(datamodule, RankingDataModule):  # a task that ignores it would report nothing
        raise ConfigError(f"eval.sampled_negatives={sampled} needs an item catalogue to sample from (task=cf, seq or "
                          f"linkpred); task={task.name} ranks given lists: set it to null")
    splits = datamodule.splits
    test = getattr(splits, "test", None) if isinstance(datamodule, RankingDataModule) else None
    datamodule.identity = data_identity(data, test, {"noise_ratio": ratio, "noise_seed": noise_seed} if ratio else {})
    if datamodule.test_evaluator.users.numel() == 0:
        if isinstance(datamodule, LtrDataModule):
            raise DataError(f"{datamodule.describe()}: no test list holds a relevant document, so no NDCG is "
                            "defined; use another fold, or task.empty_queries=zero to score such lists 0")
        raise DataError(f"data set '{splits.name}' leaves no user with a test item ({splits.n_users} users, "
                        f"{splits.test.nnz} test interactions): no metric could be computed; use data with more "
                        "interactions per user, or lower dataset.k_core / raise dataset.test_fraction")
    log.info(datamodule.describe())
    lists = isinstance(datamodule, LtrDataModule)
    who = "nodes have no held-out link" if getattr(datamodule, "graph", False) else "users have no held-out item"
    for split, ev in (("validation", datamodule.val_evaluator), ("test", datamodule.test_evaluator)):
        if ev.n_skipped:
            log.info("%d %s and are excluded from %s averages", ev.n_skipped,
                     "lists have no relevant document" if lists else f"{who} in {split}", split)
    return datamodule


def _unused_version(folder: Path, name: str) -> str:
    """``name``, or ``name-2``, ``name-3``... : the first that ``folder`` does not hold yet."""
    n = 1
    while (folder / (name if n == 1 else f"{name}-{n}")).exists():
        n += 1
    return name if n == 1 else f"{name}-{n}"


def _build_trainer(cfg: DictConfig, callbacks: list[Callback], loggers: list, out: Path) -> L.Trainer:
    """The Lightning trainer; settings it refuses (``trainer.devices=0``, an accelerator this
    machine lacks) are one line, not Hydra's wrapped exception."""
    try:
        return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, default_root_dir=str(out))
    except Exception as exc:
        cause: BaseException = exc
        while cause.__cause__ is not None:
            cause = cause.__cause__
        if find_user_error(exc) is not None:
            raise
        first = next((line.strip() for line in str(cause).splitlines() if line.strip()), type(cause).__name__)
        raise ConfigError(f"the trainer refused its settings: {first.replace('`', '').rstrip('.')}; fix the "
                          "trainer.* setting it names") from exc


def check_checkpoint_fits(module: L.LightningModule, checkpoint: str | Path) -> None:
    """Refuse, before the record is rewritten, a checkpoint whose weights are not this model's (a
    ``last.ckpt`` from a run with another ``model.dim``, backbone or data)."""
    saved = load_checkpoint(checkpoint)["state_dict"]
    # the backbone's parameters: a loss's state and a graph's buffers are sized when bound, later
    for name, tensor in module.named_parameters():
        if not name.startswith("model.") or isinstance(tensor, torch.nn.parameter.UninitializedParameter):
            continue
        held = saved.get(name)
        if held is None or (isinstance(held, torch.Tensor) and held.shape != tensor.shape):
            what = "no" if held is None else f"a {tuple(held.shape)}"
            raise BenchError(f"{checkpoint} is not this run's: it holds {what} {name} where the run's model has a "
                             f"{tuple(tensor.shape)} one; restore the run's own last.ckpt, or start the run over in a "
                             "new folder")


def warn_if_busy() -> None:
    """A warning before a single-process CPU run trains when its torch threads (all the cores, torch's
    default) would share the cores with other work: its epochs would then take several times the
    README's, with no other sign of why. Where a person or a launcher chose the threads
    (``OMP_NUM_THREADS``, a parallel sweep's or a study lane's share, a SLURM task) it says nothing:
    those placed their runs on purpose, and a study warns for its lanes itself."""
    threads, cores = torch.get_num_threads(), cpu_count()
    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("SLURM_JOB_ID") or threads < cores:
        return
    busy = oversubscription(others_running(), cores, 1, threads)
    if busy:
        log.warning("%s; pin it to free cores (taskset -c ...) or give it fewer threads (OMP_NUM_THREADS=1)", busy)


def train_in_folder(cfg: DictConfig, out: Path, writer: bool, overrides: Sequence[str],
                    extra_callbacks: Sequence[Callback], resume_checkpoint: str | Path | None,
                    take_over: Callable[[], None] | None = None) -> RunResult:
    """Train and test ``cfg`` in ``out``, a folder :func:`bench.run.train_and_test` has checked and
    locked; ``writer`` is False on DDP ranks > 0 (they write nothing); ``take_over`` makes a
    resumed folder the run's once every check of the resume has passed."""
    resolved = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    record = RunResult.read_or_new(out) if resume_checkpoint else RunResult(run_dir=out)
    record.status, record.config = RUNNING, resolved
    record.overrides = list(overrides) or record.overrides
    record.started_at = record.started_at if resume_checkpoint else now_iso()
    record.resumed_from = str(resume_checkpoint) if resume_checkpoint else record.resumed_from
    record.versions = _versions()
    record.host = host_info()
    record.sweep_id = os.environ.get(SWEEP_ID_ENV) or (record.sweep_id if resume_checkpoint else None)
    # a resumed run keeps the data hashes of its first part until the data read now is checked against them
    earlier = dict(record.provenance) if resume_checkpoint else {}
    device = run_device(cfg)
    record.provenance = {**earlier, "code": code_version(), "hardware": hardware_info(device),
                         "digits": digits_record(device)}
    if earlier.get("code") and earlier["code"] != record.provenance["code"]:
        record.provenance["code_at_start"] = earlier.get("code_at_start", earlier["code"])
    # a resumed run's record is rewritten only once its data has been checked against its first
    # part's: a refused resume leaves a completed run completed
    if writer and resume_checkpoint is None:
        atomic_write_bytes(out / RUN_CONFIG_FILE, OmegaConf.to_yaml(resolved).encode())
        record.write(out)
    seed = int(cfg.seed)
    L.seed_everything(seed, workers=True, verbose=False)

    t0 = time.perf_counter()
    with recording_data_files() as data_files:
        datamodule = build_datamodule(cfg, seed)
    _check_same_data(earlier.get("data_files"), data_files, out)
    record.provenance["data_files"] = dict(sorted(data_files.items()))
    _check_same_identity(earlier.get("data_identity"), datamodule.identity, out)
    record.provenance["data_identity"] = datamodule.identity
    record.data = {**datamodule.summary(), "val_users": int(datamodule.val_evaluator.users.numel()),
                   "test_users": int(datamodule.test_evaluator.users.numel()),
                   "val_users_skipped": datamodule.val_evaluator.n_skipped,
                   "test_users_skipped": datamodule.test_evaluator.n_skipped}
    # summed over the parts of a resumed run: each part loads the data
    record.timing_s = {**record.timing_s, "data": record.timing_s.get("data", 0.0) + time.perf_counter() - t0}
    if writer and resume_checkpoint is None:
        record.write(out)

    model = instantiate(cfg.model, **datamodule.model_kwargs())
    module: RankingModule
    divergence = cfg.train.get("divergence_factor")
    if isinstance(datamodule, LtrDataModule):
        if cfg.train.get("embedding_reg", 0.0):
            raise ConfigError("train.embedding_reg regularises user and item embedding rows, which task=ltr's "
                              "scorers do not have; set train.embedding_reg=0 (and use optimizer.weight_decay)")
        module = LtrModule(model, instantiate(cfg.loss), instantiate(cfg.optimizer), seed, divergence_factor=divergence)
    else:
        module = RankingModule(model, instantiate(cfg.loss), instantiate(cfg.optimizer), seed,
                               negatives=str(cfg.train.negatives), shared_groups=int(cfg.train.shared_groups),
                               distinct_negatives=bool(cfg.train.distinct_negatives),
                               divergence_factor=divergence,
                               embedding_reg=float(cfg.train.get("embedding_reg", 0.0)))

    if resume_checkpoint is not None:
        check_checkpoint_fits(module, resume_checkpoint)
    logger_cfg = cfg.get("logger")
    if resume_checkpoint and logger_cfg and logger_cfg.get("csv"):  # keep the earlier parts' logs
        logger_cfg = OmegaConf.merge(logger_cfg, {"csv": {"version": _unused_version(out / "csv", "resumed")}})
    loggers = build_loggers(logger_cfg)
    callbacks = build_callbacks(cfg) + list(extra_callbacks)
    trainer = _build_trainer(cfg, callbacks, loggers, out)
    if resume_checkpoint is not None and writer:  # every check passed: the resumed part is running
        if take_over is not None:
            take_over()
        record.write(out)
    for lg in loggers:
        lg.log_hyperparams(resolved)

    if device is None and writer and str(cfg.trainer.get("devices", 1)) in ("1", "auto"):  # one process
        warn_if_busy()
    # a checkpoint is data: unpickling may only rebuild tensors and plain containers, never run code
    # (check_resumable refused a crafted or damaged one before anything was written)
    trainer.fit(module, datamodule=datamodule, ckpt_path=str(resume_checkpoint) if resume_checkpoint else None,
                weights_only=True)
    best = trainer.checkpoint_callback
    best_path = best.best_model_path if isinstance(best, ModelCheckpoint) else ""
    if not best_path:
        raise BenchError("no validation ran, so there is no best checkpoint to test; set trainer.max_epochs >= 1 "
                         "and keep callbacks.best_checkpoint")
    trainer.test(module, datamodule=datamodule, ckpt_path=best_path, verbose=False, weights_only=True)
    return RunResult.read(out) if writer else record
