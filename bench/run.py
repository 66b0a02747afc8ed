"""One run, up to its training: the settings checked, the folder locked and checked (or the resume
checked against the run it continues), made the run's, and a failure after that recorded there.

None of that imports Lightning: a command refused by those checks (a bad setting, a used folder, a
resume whose checkpoint or schedule cannot continue) answers in ~2-3 s, not ~6. The training itself
(data, model, Lightning's fit and test, the ``running`` record) is :mod:`bench.training`, imported
once every such refusal has passed; what only the data or the trainer can refuse is refused there.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from bench.allocator import retain_freed_memory
from bench.composition import check_writes_inside
from bench.determinism import digits_record, run_device
from bench.distributed import process_rank
from bench.errors import BenchError, ConfigError, TrainingDiverged, find_user_error
from bench.evaluation import metric_names
from bench.evaluation.ties import check_mode
from bench.losses import LOSSES
from bench.parallel import place_current_job
from bench.records import COMPLETED, FAILED, RunResult
from bench.records.folder import (
    check_holds_no_other_run,
    check_no_links,
    check_not_inside_a_run,
    clear_previous_run,
    remove_stale_temporaries,
)
from bench.records.io import load_checkpoint
from bench.records.lock import RunLock
from bench.records.schema import DIVERGED, SWEEP_ID_ENV
from bench.step import NEGATIVE_MODES
from bench.validation import validate

if TYPE_CHECKING:
    from lightning.pytorch.callbacks import Callback

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
    if process_rank() != 0:  # DDP: ranks > 0 write nothing of their own
        from bench.training import train_in_folder

        return train_in_folder(cfg, out, False, overrides, extra_callbacks, resume_checkpoint)
    check_not_inside_a_run(out)  # before the lock file would be made inside another run's folder
    # one run per folder: a second one (or a completed run without force=true) is refused
    with RunLock(out, force=bool(cfg.get("force", False)), resuming=resume_checkpoint is not None,
                 claim=False) as lock:
        check_no_links(out)
        if resume_checkpoint is not None:
            check_resumable(out, cfg, resume_checkpoint)
        else:
            check_holds_no_other_run(out)
        # Lightning (seconds) once every refusal has passed, before the folder is claimed: a run
        # stopped while it imports leaves the folder as it found it
        from bench.training import train_in_folder

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
            return train_in_folder(cfg, out, True, overrides, extra_callbacks, resume_checkpoint, owner.own)
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
    check_same_kernels(res.digits, digits_record(run_device(cfg)), out)


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
