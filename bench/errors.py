"""User-facing errors.

A :class:`BenchError` is a problem with the user's input or environment (unknown name,
missing file, malformed row, ...). The command line prints its message as one line and
exits with status 2 instead of showing a traceback; anything else is a bug and keeps
its traceback.
"""


class BenchError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


class DataError(BenchError):
    """Missing, corrupt or malformed data."""


class TrainingDiverged(BenchError):
    """The loss became NaN or infinite."""
