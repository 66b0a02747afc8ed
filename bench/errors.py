"""User-facing errors.

A :class:`BenchError` is a problem with the user's input or environment (unknown name,
missing file, malformed row, ...). The command line prints its message as one line and
exits with status 2 instead of showing a traceback; anything else is a bug and keeps
its traceback.
"""

import argparse
import errno
from typing import NoReturn


class BenchError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


class ConfigError(BenchError):
    """An invalid setting."""


#: OS errors that mean "this machine cannot store the run": a user's problem, said in one line
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT, errno.ENOTDIR, errno.EPERM})


def storage_error(exc: OSError, path: object = None) -> BenchError:
    """The one-line error for an OS error of storage while writing ``path`` (default: the error's file)."""
    where = path if path is not None else exc.filename
    return BenchError(f"cannot write {f'{where}: ' if where else ''}{exc.strerror or exc}; free some space or choose "
                      "another output folder (hydra.run.dir=...)")


def find_user_error(exc: BaseException) -> BenchError | None:
    """The BenchError behind ``exc``, following ``raise ... from`` chains (Hydra's
    ``instantiate`` wraps constructor errors in its own exception); an OS error of storage
    (disk full, no permission, read-only) anywhere in the chain becomes one naming the path."""
    seen = set()
    current: BaseException | None = exc
    storage: OSError | None = None
    while current is not None and id(current) not in seen:
        if isinstance(current, BenchError):
            return current
        if isinstance(current, OSError) and current.errno in STORAGE_ERRNOS and storage is None:
            storage = current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return storage_error(storage) if storage is not None else None


class DataError(BenchError):
    """Missing, corrupt or malformed data."""


class TrainingDiverged(BenchError):
    """The loss became NaN or infinite."""


class FolderTaken(BenchError):
    """The output folder belongs to another run (in use, or completed): nothing may be written there."""


def one_line_usage_errors(parser: "argparse.ArgumentParser") -> "argparse.ArgumentParser":
    """``parser`` with argparse's usage errors as one line (``error: argument --ks: ...; see --help``),
    not the usage block, exit status 2 as argparse's."""
    import sys

    def error(message: str) -> NoReturn:
        print(f"error: {message}; see {parser.prog} --help", file=sys.stderr)
        sys.exit(2)

    parser.error = error  # type: ignore[method-assign]
    return parser
