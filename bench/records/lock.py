"""One run per output folder: an OS lock on ``<folder>/.lock``, held by the running process.

Two runs writing one folder would mix their checkpoints and results (a run could be tested on
another's ``best.ckpt``), so a run locks its folder before writing anything and frees it when it
ends. The lock is ``flock(2)`` on the file: the kernel frees it when its holder dies, however it
dies (once any process it forked with the file open has exited too), so there is no stale lock to
take over and no window in which two processes both decide that a dead holder's lock is theirs.
The file also names its holder (pid, host), for messages.
A folder that already holds a completed run, or an interrupted one with a checkpoint to resume
from, is refused unless the run is a resume or ``force=true``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path

from bench.errors import BenchError, FolderTaken
from bench.records.io import read_json
from bench.records.layout import CHECKPOINT_DIR, COMPLETED, FAILED, RESULTS_FILE, RUNNING

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
#: tries of a lock found held, ``RETRY_S`` apart, before the folder counts as in use: a reader
#: that probes the lock (:func:`holder_alive`) holds it for microseconds
TRIES, RETRY_S = 3, 0.05


def _owner(path: Path) -> dict | None:
    try:
        with open(path, "rb") as f:
            owner = json.loads(f.read(4096) or b"null")
        return owner if isinstance(owner, dict) else None
    except (OSError, ValueError):
        return None


def _open_lock_file(path: Path) -> int:
    # O_NOFOLLOW: a link planted as .lock must not make the run write somewhere else
    return os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


def holder_name(folder: str | Path) -> str:
    """Who holds ``folder``'s lock, as its lock file names it: "process PID on HOST", for messages."""
    owner = _owner(Path(folder) / LOCK_FILE)
    return f"process {owner.get('pid')} on {owner.get('host')}" if owner else "another process"


def holder_alive(folder: str | Path) -> bool:
    """Is a live process holding ``folder``'s lock (on this or, over a shared file system with
    locks, any host)? A shared probe: it never blocks a run that takes the lock for real."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)  # closing drops the probe's shared lock
    return False


class RunLock:
    """The lock of one run folder; use as a context manager or call :meth:`release`.

    Args:
        folder: the run's output folder.
        force: take the folder even if it holds a completed run.
        resuming: the run continues the folder's own run (a completed record is expected).
        claim: name this process in the lock file at once; False leaves that to :meth:`claim`, once
            the caller's own checks have passed (until then a refusal changes nothing in the folder).
    Raises:
        FolderTaken: another live process holds the folder, or it holds a completed run
            (without ``force``/``resuming``).
        BenchError: the folder cannot be made or written.
    """

    def __init__(self, folder: str | Path, force: bool = False, resuming: bool = False, claim: bool = True) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self.held = False
        self._fd: int | None = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BenchError(f"cannot create the output folder {self.folder}: {exc.strerror or exc}; choose another "
                             "one (hydra.run.dir=...)") from exc
        self._created = self._acquire()
        self._claimed = False
        try:
            if not (force or resuming):
                self._refuse_completed()
        except BaseException:
            self.release()
            raise
        if claim:
            self.claim()

    def _refuse_completed(self) -> None:
        if not (self.folder / RESULTS_FILE).is_file():
            return
        try:  # the status alone: the lock reads no more of a record than that
            status = str(read_json(self.folder / RESULTS_FILE).get("status"))
        except (OSError, ValueError, AttributeError):
            status = "unreadable"
        if status == COMPLETED:
            raise FolderTaken(f"{self.folder} already holds a completed run; choose another output folder or pass "
                              "force=true to overwrite it")
        # we hold the lock, so a "running" record is a killed run's; it, or one that failed (a full disk,
        # a time limit), can continue from its last checkpoint: work to keep
        if status in (RUNNING, FAILED) and (self.folder / CHECKPOINT_DIR / "last.ckpt").is_file():
            what = "an interrupted" if status == RUNNING else "a failed"
            raise FolderTaken(f"{self.folder} holds {what} run that can continue from its last checkpoint; continue "
                              f"it with resume={self.folder}, or pass force=true to start over there")

    def _acquire(self) -> bool:
        """Lock the file (made if missing); whether this call made it."""
        for attempt in range(TRIES):
            created = not os.path.lexists(self.path)
            try:
                fd = _open_lock_file(self.path)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise BenchError(f"{self.path} is a symbolic link; a run writes only inside its own folder: "
                                     "remove the link") from None
                raise BenchError(f"cannot write to the output folder {self.folder}: {exc.strerror}; choose another one "
                                 "(hydra.run.dir=...)") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise BenchError(f"cannot lock {self.path}: {exc.strerror}; the file system may not support "
                                     "locks: choose an output folder on another one") from exc
                if attempt + 1 < TRIES:
                    time.sleep(RETRY_S)
                    continue
                raise FolderTaken(f"{self.folder} is in use by {holder_name(self.folder)}; choose another output "
                                  "folder, or wait for that run to end") from None
            # the holder before us may have removed the file after we opened it: our lock would
            # then be on a name nobody else sees; start over on the file that is there now
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path, follow_symlinks=False))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            self._fd, self.held = fd, True
            return created
        raise FolderTaken(f"{self.folder} is being locked and unlocked by other processes; retry")

    def claim(self) -> None:
        """Name this process in the lock file: the folder is its now. Until then a refusal leaves
        the folder as it found it, a dead holder's lock file included."""
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
        self._claimed = True

    def release(self) -> None:
        if self.held and self._fd is not None:
            if self._created or self._claimed:
                # while still holding: a process that opened the old file finds it gone and retries
                self.path.unlink(missing_ok=True)
            os.close(self._fd)
        self._fd, self.held = None, False

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
