"""One run per output folder: a lock file held by the running process.

Two runs writing one folder would mix their checkpoints and results (a run could be tested on
another's ``best.ckpt``), so a run takes ``<folder>/.lock`` before writing anything and frees it
when it ends. A second run on a folder in use stops with a one-line error; a lock whose process
is gone (same host, dead pid) is stale and taken over; a folder that already holds a completed
run is refused unless the run is a resume or ``force=true``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

from bench.errors import BenchError, FolderTaken
from bench.results.schema import COMPLETED, RESULTS_FILE, RunResult

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _owner(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def holder_alive(folder: str | Path) -> bool | None:
    """Is a live process holding ``folder``? False: no lock, or its process on this host is gone;
    None: held from another host (cannot be checked)."""
    owner = _owner(Path(folder) / LOCK_FILE)
    if owner is None:
        return False
    if owner.get("host") != socket.gethostname():
        return None
    return pid_alive(int(owner.get("pid", -1)))


class RunLock:
    """The lock of one run folder; use as a context manager or call :meth:`release`.

    Args:
        folder: the run's output folder.
        force: take the folder even if it holds a completed run.
        resuming: the run continues the folder's own run (a completed record is expected).
    """

    def __init__(self, folder: str | Path, force: bool = False, resuming: bool = False) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self.held = False
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BenchError(f"cannot create the output folder {self.folder}: {exc.strerror or exc}; choose another "
                             "one (hydra.run.dir=...)") from exc
        if not (force or resuming) and (self.folder / RESULTS_FILE).is_file():
            try:
                status = RunResult.read(self.folder).status
            except BenchError:
                status = "unreadable"
            if status == COMPLETED:
                raise FolderTaken(f"{self.folder} already holds a completed run; choose another output folder or "
                                 "pass force=true to overwrite it")
        self._acquire()

    def _acquire(self) -> None:
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except PermissionError as exc:
                raise BenchError(f"cannot write to the output folder {self.folder}: {exc.strerror}; choose another one "
                                 "(hydra.run.dir=...)") from exc
            except FileExistsError:
                owner = _owner(self.path)
                if owner and owner.get("host") == me["host"] and not pid_alive(int(owner.get("pid", -1))):
                    log.warning("taking over the stale lock of %s (process %s is gone)", self.folder, owner["pid"])
                    self.path.unlink(missing_ok=True)
                    continue
                who = f"process {owner['pid']} on {owner['host']}" if owner else "another process"
                raise FolderTaken(f"{self.folder} is in use by {who}; choose another output folder, or wait for "
                                 f"that run to end (remove {self.path} if it is certainly gone)") from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            self._remove_stale_temporaries()
            return
        raise BenchError(f"could not lock {self.folder}; remove {self.path} and retry")

    def _remove_stale_temporaries(self) -> None:
        # a run killed while writing a file atomically leaves its temporary copy (kill -9 runs no
        # cleanup); holding the lock, nothing else can be writing one
        for tmp in self.folder.glob("*.tmp"):
            log.info("removing %s, left by a run killed while writing it", tmp.name)
            tmp.unlink(missing_ok=True)

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
