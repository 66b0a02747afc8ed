"""User-facing errors.

A :class:`BenchError` is a problem with the user's input or environment (unknown name,
missing file, malformed row, ...). The command line prints its message as one line and
exits with status 2 instead of showing a traceback; anything else is a bug and keeps
its traceback.
"""


class BenchError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


class ConfigError(BenchError):
    """An invalid setting."""


def find_user_error(exc: BaseException) -> BenchError | None:
    """The BenchError behind ``exc``, following ``raise ... from`` chains (Hydra's
    ``instantiate`` wraps constructor errors in its own exception)."""
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, BenchError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class DataError(BenchError):
    """Missing, corrupt or malformed data."""


class TrainingDiverged(BenchError):
    """The loss became NaN or infinite."""


class FolderTaken(BenchError):
    """The output folder belongs to another run (in use, or completed): nothing may be written there."""
