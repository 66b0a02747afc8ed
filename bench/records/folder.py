"""The run folder as the running process keeps it: nothing written through a link, no file of an
earlier run left to be mistaken for this one's, the command's record (``.hydra/``) and the log
(``bench.log``) written only once the folder is this run's (after :class:`~bench.records.lock.RunLock`).

Hydra would write ``.hydra/`` and open ``bench.log`` before any of the run's code decides whether
the folder is free; ``conf/config.yaml`` turns both off (``hydra.output_subdir: null``, the
console-only ``hydra/job_logging: bench``), and :class:`RunLog` and :func:`write_command_record`
do them here instead, so a run refused for a taken folder changes no byte of it.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bench.errors import BenchError, FolderTaken
from bench.records.io import atomic_write_bytes
from bench.records.layout import RESULTS_FILE, RUN_ARTIFACTS

log = logging.getLogger(__name__)

LOG_FILE = "bench.log"
COMMAND_DIR = ".hydra"
#: Hydra's default job-log line
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


def check_out_is_a_folder(out: str | Path, writer: str) -> None:
    """Refuse an ``--out`` that is a file before anything is read: ``writer`` writes a folder of files there."""
    if Path(out).exists() and not Path(out).is_dir():
        raise BenchError(f"--out {out} is a file; the {writer} writes a folder of files: choose a folder")


def check_no_links(folder: Path) -> None:
    """Refuse a run folder holding a symbolic link anywhere inside it that leads out of it: the run
    would write (a checkpoint, a log line) wherever the link points. Links that stay inside (W&B's
    ``wandb/latest-run``) are kept.

    Raises:
        BenchError: naming the first such link and its target.
    """
    root_dir = folder.resolve()
    for root, dirs, files in os.walk(folder, followlinks=False):
        if Path(root) == folder and OTHERS_OWN in dirs and not (folder / OTHERS_OWN).is_symlink():
            dirs.remove(OTHERS_OWN)  # W&B's own tree: it links its cache logs in, and the run writes nothing there
        for name in sorted(dirs + files):
            path = Path(root) / name
            if path.is_symlink() and not path.resolve().is_relative_to(root_dir):
                raise BenchError(f"{path} is a symbolic link out of the run's folder (to {os.readlink(path)}); a run "
                                 "writes only inside its own folder: replace the link with a plain file or folder, "
                                 "or choose another output folder")


#: a folder another program keeps inside a run folder, links of its own included (W&B's)
OTHERS_OWN = "wandb"


def enclosing_run(path: Path) -> Path | None:
    """The run folder ``path`` lies in or is (the nearest folder above it holding a ``results.json``),
    by names, not through links."""
    path = Path(os.path.abspath(path))
    return next((p for p in (path, *path.parents) if (p / RESULTS_FILE).is_file()), None)


def check_not_inside_a_run(folder: Path) -> None:
    """Refuse a run folder that lies inside another run's folder (a new run there would be cleared
    with that run's files, or clear them).

    Raises:
        FolderTaken: naming the run folder above.
    """
    above = enclosing_run(Path(os.path.abspath(folder)).parent)
    if above is not None:
        raise FolderTaken(f"{folder} lies inside the run folder {above}; a run folder holds one run: choose a "
                          "folder outside it")


def check_holds_no_other_run(folder: Path) -> None:
    """Refuse a run folder that holds another run's folder somewhere below it (a new run would clear
    it with its own earlier files)."""
    inner = next((p.parent for p in folder.glob(f"*/**/{RESULTS_FILE}")), None)
    if inner is not None:
        raise FolderTaken(f"{folder} holds another run's folder ({inner}); choose another output folder")


#: the temporary files bench's atomic writes leave when killed mid-write (kill -9 runs no clean-up)
TEMPORARIES = ("results.json.*.tmp", "per_user_test.npz.*.tmp", "run_config.yaml.*.tmp", ".hydra/*.yaml.*.tmp",
               "checkpoints/last.ckpt.tmp")


def remove_stale_temporaries(folder: Path) -> None:
    """Remove the temporary copies a run killed while writing left (:data:`TEMPORARIES`; no other
    file). Call holding the folder's lock, once it is this run's: nothing else can be writing one."""
    for pattern in TEMPORARIES:
        for tmp in folder.glob(pattern):
            log.info("removing %s, left by a run killed while writing it", tmp.relative_to(folder))
            tmp.unlink(missing_ok=True)


def clear_previous_run(folder: Path) -> list[str]:
    """Remove what an earlier run wrote into ``folder`` (:data:`~bench.records.schema.RUN_ARTIFACTS`;
    a folder that is no run folder keeps everything else). Call holding the folder's lock.

    Returns:
        the names removed.
    """
    removed = []
    for name in RUN_ARTIFACTS:
        path = folder / name
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        else:
            continue
        removed.append(name)
    if removed:
        log.info("cleared the earlier run's %s from %s", ", ".join(removed), folder)
    return removed


def write_command_record(folder: Path, task_cfg: DictConfig, hydra_cfg: Any, overrides: list[str]) -> None:
    """``.hydra/{config,hydra,overrides}.yaml`` as Hydra writes them: the composed config before
    interpolation, Hydra's own settings and the command-line overrides."""
    target = folder / COMMAND_DIR
    atomic_write_bytes(target / "config.yaml", OmegaConf.to_yaml(task_cfg).encode())
    if hydra_cfg is not None:
        atomic_write_bytes(target / "hydra.yaml", OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})).encode())
    atomic_write_bytes(target / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(list(overrides))).encode())


#: log lines held before the folder is the run's (a few dozen in practice); beyond, the oldest go
HELD_LINES = 10_000


class _Held(logging.handlers.MemoryHandler):
    """A memory handler that, while it has nowhere to write, keeps only its last ``capacity`` lines."""

    def flush(self) -> None:
        if self.target is None:
            del self.buffer[:-self.capacity or None]  # under the handler's lock: emit() holds it
            return
        super().flush()


class RunLog:
    """The job's log lines: kept in memory until the run owns its folder, then written to
    ``<folder>/bench.log`` (appended to, so a resumed run's log continues its first part's).

    A run refused before that (a taken folder, a bad setting) shows its lines on the console only.
    """

    def __init__(self) -> None:
        self._buffer = _Held(capacity=HELD_LINES, flushLevel=logging.CRITICAL + 1)
        self._file: logging.FileHandler | None = None
        logging.getLogger().addHandler(self._buffer)

    def open(self, folder: Path) -> None:
        """Start writing to ``folder/bench.log`` with the lines so far."""
        path = folder / LOG_FILE
        if path.is_symlink():
            raise BenchError(f"{path} is a symbolic link; a run writes only inside its own folder: remove the link")
        handler = logging.FileHandler(path, mode="a", encoding="utf-8")
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        self._buffer.setTarget(handler)
        self._buffer.flush()
        root = logging.getLogger()
        root.removeHandler(self._buffer)
        root.addHandler(handler)
        self._file = handler

    def close(self) -> None:
        root = logging.getLogger()
        root.removeHandler(self._buffer)
        self._buffer.setTarget(None)
        self._buffer.close()
        if self._file is not None:
            root.removeHandler(self._file)
            self._file.close()
            self._file = None


def log_other_rank(folder: Path, job_name: str) -> None:
    """Under DDP, a rank > 0 writes its log lines to ``<folder>/<job name>.log`` (Lightning names
    those jobs ``train_ddp_process_<rank>``); rank 0 owns the folder and its ``bench.log``."""
    folder.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(folder / f"{job_name}.log", mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger().addHandler(handler)


@contextmanager
def writing_into(run_dir: Path, out: Path) -> Iterator[None]:
    """For a command that writes its output (``export/``, ``threshold_study/``) into a run's folder:
    the run's lock is held meanwhile (refused while a live run holds the folder) and nothing is
    written through a link there. Output elsewhere is where the user asked for it.

    Raises:
        FolderTaken: a live process holds the run's folder.
        BenchError: a link in the folder leads out of it.
    """
    from bench.records.lock import RunLock

    # the folder of whichever run ``out`` lies in: this run's, or another's (--out into it)
    owner = enclosing_run(out) or (run_dir if Path(os.path.abspath(out)).is_relative_to(os.path.abspath(run_dir))
                                   else None)
    with RunLock(owner, resuming=True) if owner is not None else nullcontext():
        if owner is not None:
            check_no_links(owner)
        yield
