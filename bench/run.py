"""One run: config -> data -> task -> model + loss -> train -> full-ranking test -> results.json.

The ``running`` record is written first (so a crash leaves a trace), the data counts once
the data is loaded, and the callbacks of ``conf/callbacks/`` complete it when testing ends.
"""

from __future__ import annotations

import logging
import os
import platform
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

import bench.resolvers  # noqa: F401  (the ${bench_...:} resolvers the config uses)
from bench.allocator import retain_freed_memory
from bench.composition import check_writes_inside
from bench.datasets.noise import check_noise, load_dataset
from bench.datasets.provenance import recording as recording_data_files
from bench.determinism import digits_record
from bench.errors import BenchError, ConfigError, DataError, TrainingDiverged, find_user_error
from bench.evaluation import metric_names
from bench.evaluation.sampled import check_sampled
from bench.evaluation.ties import check_mode
from bench.loggers import build_loggers
from bench.losses import LOSSES
from bench.models import MODELS
from bench.parallel import place_current_job
from bench.records import COMPLETED, FAILED, RUN_CONFIG_FILE, RUNNING, RunResult, atomic_write_bytes
from bench.records.folder import (
    check_holds_no_other_run,
    check_no_links,
    check_not_inside_a_run,
    clear_previous_run,
    remove_stale_temporaries,
)
from bench.records.identity import data_identity, short
from bench.records.io import load_checkpoint
from bench.records.lock import RunLock
from bench.records.provenance import code_version, hardware_info, host_info, now_iso
from bench.records.schema import DIVERGED, SWEEP_ID_ENV
from bench.step import NEGATIVE_MODES
from bench.tasks.datamodule import RankingDataModule
from bench.tasks.ltr import LtrDataModule, LtrModule
from bench.tasks.module import RankingModule
from bench.validation import validate

log = logging.getLogger(__name__)


def format_metrics_table(means: dict[str, float], ks: Sequence[int]) -> str:
    """A plain-text table, rows = K, columns = the metrics present in ``means``."""
    names = [m for m in metric_names() if any(f"{m}@{k}" in means for k in ks)] or metric_names()
    rows = [f"{'K':>5} " + " ".join(f"{m:>10}" for m in names)]
    for k in ks:
        rows.append(f"{k:>5} " + " ".join(f"{means.get(f'{m}@{k}', float('nan')):>10.4f}" for m in names))
    return "\n".join(rows)


def check_monitor(cfg: DictConfig) -> None:
    """``train.monitor`` must be a computed metric at a K of ``eval.ks``."""
    metric, _, k = str(cfg.train.monitor).partition("@")
    names = metric_names()
    if metric not in names or not k.isdigit() or int(k) not in set(cfg.eval.ks):
        raise ConfigError(f"train.monitor={cfg.train.monitor} is not a computed metric; use one of "
                          f"{'/'.join(names)} at a K in eval.ks={list(cfg.eval.ks)}")


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
    import lightning

    out = {"python": platform.python_version(), "torch": torch.__version__, "lightning": lightning.__version__,
           "hydra": hydra.__version__}
    for name in RECORDED_LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _run_device(cfg: DictConfig) -> str | None:
    """The CUDA device a run will train on (for its hardware record), None on the CPU."""
    if str(cfg.trainer.get("accelerator", "auto")) not in ("auto", "gpu", "cuda") or not torch.cuda.is_available():
        return None
    devices = cfg.trainer.get("devices")
    return f"cuda:{devices[0]}" if isinstance(devices, Sequence) and not isinstance(devices, str) and devices \
        else "cuda"


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


class NothingToResume(BenchError):
    """``resume=`` of a completed run that asks for no more epochs: the folder is left as it is."""


def train_and_test(cfg: DictConfig, overrides: Sequence[str] = (), extra_callbacks: Sequence[Callback] = (),
                   resume_checkpoint: str | Path | None = None,
                   on_owned: Callable[[Path], None] | None = None) -> RunResult:
    """Train and test one configuration; write ``results.json`` in ``cfg.output_dir``.

    The folder is touched only once it is this run's: settings are checked first, then the folder
    is locked (:class:`~bench.records.lock.RunLock`: refused while another process holds it, or
    when it holds a completed or resumable run and neither ``force=true`` nor ``resume=`` says
    otherwise), checked for links, and cleared of an earlier run's files (a new run) or checked
    to be resumable (a resume). A failure after that is recorded in the run's own
    ``results.json`` (``failed``, or ``diverged`` for a loss that blew up); one before it changes
    nothing on disk.

    Args:
        cfg: the composed config (see ``conf/config.yaml``).
        overrides: the command-line overrides that made this run (recorded).
        extra_callbacks: more Lightning callbacks (tests use this to interrupt a run).
        resume_checkpoint: a ``last.ckpt`` to continue from.
        on_owned: called with the folder once it is this run's, before anything is written (the
            command line opens ``bench.log`` and writes ``.hydra/`` there).
    Returns:
        the completed :class:`~bench.records.RunResult`.
    Raises:
        NothingToResume: a resume of a completed run with no more epochs to train.
    """
    place_current_job(cfg)
    allocator = retain_freed_memory(bool(cfg.get("retain_freed_memory", True)))
    log.debug("freed-memory retention: %s", allocator)
    check_settings(cfg)
    out = Path(cfg.output_dir)
    if getattr(rank_zero_only, "rank", 0) != 0:  # DDP: ranks > 0 write nothing of their own
        return _train_and_test(cfg, out, False, overrides, extra_callbacks, resume_checkpoint)
    check_not_inside_a_run(out)  # before the lock file would be made inside another run's folder
    # one run per folder: a second one (or a completed run without force=true) is refused
    with RunLock(out, force=bool(cfg.get("force", False)), resuming=resume_checkpoint is not None,
                 claim=False) as lock:
        check_no_links(out)
        if resume_checkpoint is not None:
            check_resumable(out, cfg, resume_checkpoint)
        else:
            check_holds_no_other_run(out)
        # a new run's folder is its own from here; a resumed one only once its record is rewritten,
        # after every check (a resume refused on its data or its trainer leaves the folder as it was,
        # the lock file of the process that was killed included)
        owner = _Owner(lock)
        if resume_checkpoint is None:
            owner.own()
            clear_previous_run(out)
        if on_owned is not None:
            on_owned(out)
        try:
            return _train_and_test(cfg, out, True, overrides, extra_callbacks, resume_checkpoint, owner)
        except Exception as exc:
            if owner.owns:
                record_failure(out, overrides, exc)
            raise


class _Owner:
    """Whether the run owns its folder yet: from :meth:`own` on, the lock file names it, the
    earlier run's temporaries are gone and a failure is recorded in the folder."""

    def __init__(self, lock: RunLock) -> None:
        self.lock, self.owns = lock, False

    def own(self) -> None:
        if not self.owns:
            self.lock.claim()
            remove_stale_temporaries(self.lock.folder)
            self.owns = True


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


def record_failure(out: Path, overrides: Sequence[str], exc: BaseException) -> None:
    """Mark the run in ``out`` (this process's own) ``failed``, or ``diverged`` when its loss blew
    up, with the one-line error and the traceback."""
    try:
        record = RunResult.read_or_new(out)
        user_error = find_user_error(exc)
        record.status = DIVERGED if isinstance(user_error, TrainingDiverged) else FAILED
        record.sweep_id = record.sweep_id or os.environ.get(SWEEP_ID_ENV) or None
        record.overrides = record.overrides or list(overrides)  # the run's own, when it recorded them
        record.error = str(user_error) if user_error else f"{type(exc).__name__}: {exc}"
        record.traceback = "".join(traceback.format_exception(exc))
        record.write(out)
    except Exception as inner:  # reporting must not hide the original error
        log.warning("could not record the failure in %s: %s", out, inner)


def _trained_epochs(state: dict[str, Any]) -> int:
    """Epochs a Lightning checkpoint has trained (``last.ckpt`` is saved as epoch ``epoch`` ends)."""
    epoch = state.get("epoch")
    return int(epoch) + 1 if isinstance(epoch, int) else 0


#: what every Lightning checkpoint of a run holds
LIGHTNING_KEYS = ("state_dict", "epoch", "global_step", "loops", "optimizer_states")


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


def check_resumable(out: Path, cfg: DictConfig, checkpoint: str | Path) -> None:
    """Refuse, before anything is written, a resume that cannot continue the run in ``out``: a
    checkpoint that is crafted, truncated or corrupt, or fewer epochs than it has trained.

    Raises:
        NothingToResume: the run is completed and ``trainer.max_epochs`` asks for no more epochs.
        BenchError: the one-line reason otherwise.
    """
    res = RunResult.read(out)
    state = load_checkpoint(checkpoint)  # a crafted or damaged file is refused here, not by Lightning
    missing = [k for k in LIGHTNING_KEYS if k not in state]
    if missing:
        raise BenchError(f"{checkpoint} is not a checkpoint of a run (it has no {', '.join(missing)}); restore the "
                         "run's own last.ckpt, or start the run over in a new folder")
    trained = _trained_epochs(state)
    wanted = int(cfg.trainer.max_epochs)
    if res.status == COMPLETED:
        recorded = int(((res.config.get("trainer") or {}).get("max_epochs")) or 0)
        if wanted == recorded:
            raise NothingToResume(f"{out} holds a completed run of {recorded} epochs; nothing to resume (add "
                                  f"trainer.max_epochs=N with N > {recorded} to train it further)")
        if wanted < recorded:
            raise BenchError(f"trainer.max_epochs={wanted} would shorten {out}'s completed {recorded}-epoch run; "
                             f"resume only extends a run (trainer.max_epochs > {recorded}): start a new run for "
                             "a shorter schedule")
    if wanted < trained:
        raise BenchError(f"{checkpoint} has trained {trained} epochs, more than trainer.max_epochs={wanted}; resume "
                         f"with trainer.max_epochs >= {trained}, or start a new run for a shorter schedule")
    check_same_kernels(res.digits, digits_record(_run_device(cfg)), out)


#: what must match for a resumed run to compute as its first part did (threads only may differ: a
#: parallel sweep places them, and the runs here are bit-identical at 1 and 2 threads)
SAME_KERNELS = ("torch", "device", "cpu_capability", "mkl_cbwr")


def check_same_kernels(before: dict[str, Any], now: dict[str, Any], out: Path) -> None:
    """Refuse to continue a run under other kernels than its first part's: its digits would then
    depend on both, and its record could name only one (runs from before the record pass)."""
    def kind(key: str, value: Any) -> Any:  # a device by its type: cuda:0 and cuda:1 run the same kernels
        return str(value).split(":")[0] if key == "device" else value

    changed = [k for k in SAME_KERNELS if k in before and kind(k, before[k]) != kind(k, now.get(k))]
    if changed:
        shown = ", ".join(f"{k} {before[k]} then, {now.get(k)} now" for k in changed)
        raise BenchError(f"cannot resume {out} under other kernels ({shown}); resume it where it started (the same "
                         f"torch, device and BENCH_CPU_DIGITS={before.get('mode', 'portable')}), or start the run "
                         "over in a new folder")


def check_settings(cfg: DictConfig, writes: bool = True) -> None:
    """Every check of a composed config that needs no data: what a run refuses before it touches
    its folder, and what a sweep checks for each of its jobs before starting any.

    Raises:
        ConfigError: the first bad setting, in one line.
    """
    validate(cfg)
    check_monitor(cfg)
    check_mode(str(cfg.eval.ties))
    if cfg.train.negatives not in NEGATIVE_MODES:
        raise ConfigError(f"train.negatives={cfg.train.negatives} is not a mode; use {' or '.join(NEGATIVE_MODES)}")
    _check_strategy(cfg)
    if writes:
        check_writes_inside(cfg)


def _check_strategy(cfg: DictConfig) -> None:
    """Refuse, before the run folder is touched, a loss that plain DDP cannot train."""
    name = OmegaConf.select(cfg, "loss.name")
    if cfg.trainer.get("strategy") == "ddp" and name in LOSSES and getattr(LOSSES.get(name), "alternates_players",
                                                                          False):
        raise ConfigError(f"loss={name} trains its players in turns, so some parameters get no gradient in "
                          "some epochs, which plain DDP refuses; add trainer.strategy=ddp_find_unused_parameters_true")


def _train_and_test(cfg: DictConfig, out: Path, writer: bool, overrides: Sequence[str],
                    extra_callbacks: Sequence[Callback], resume_checkpoint: str | Path | None,
                    owner: _Owner | None = None) -> RunResult:
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
    device = _run_device(cfg)
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
        if owner is not None:
            owner.own()
        record.write(out)
    for lg in loggers:
        lg.log_hyperparams(resolved)

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
