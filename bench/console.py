"""What a run prints: bench's own lines by default, everything with ``log.verbose=true`` (or ``-v``).

Quiet means the lines a user cannot act on are left out of the console and the run's log:
Lightning's accelerator inventory (``GPU available: False``), its advertisement for another logger,
its fit/restore chatter, and a deprecation warning raised inside Lightning on every run. Warnings
and errors from any library still show. ``ConsoleHandler`` writes log lines through tqdm so that a
progress bar at a terminal stays one intact line under them.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any

#: libraries whose INFO lines describe their own setup, not the run
CHATTY_LOGGERS = ("lightning.pytorch", "lightning.fabric", "lightning", "pytorch_lightning")
#: warnings raised by the libraries on every run, about their own code
LIBRARY_WARNINGS = (r".*isinstance\(treespec, LeafSpec\).*",
                    r".*The `srun` command is available on your system but is not used.*")


#: the last :func:`configure` call's choice, for :func:`reapply`
_configured: list[bool] = []


def configure(verbose: bool) -> None:
    """Quiet (``verbose`` False) or everything (True), for this process; idempotent."""
    _configured[:] = [verbose]
    level = logging.INFO if verbose else logging.WARNING
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    for pattern in LIBRARY_WARNINGS:
        if verbose:
            warnings.filterwarnings("default", message=pattern)
        else:
            warnings.filterwarnings("ignore", message=pattern)


def reapply() -> None:
    """After Lightning's import, which a run makes only once its folder is its own (after the console
    was configured): :func:`configure` again, as last called (the import set Lightning's loggers to
    INFO), and, where the root logger has handlers (a run's console and ``bench.log``), the
    ``lightning`` logger's own stderr handler removed (its children propagate to the root when it has
    handlers, so every line of theirs would otherwise show twice)."""
    if _configured:
        configure(_configured[0])
    if logging.getLogger().hasHandlers():
        lightning = logging.getLogger("lightning")
        for handler in [h for h in lightning.handlers if type(h) is logging.StreamHandler]:
            lightning.removeHandler(handler)


def wants_verbose(argv: list[str]) -> list[str]:
    """``python -m bench -v ...`` as ``log.verbose=true`` (argv without the flag)."""
    if "-v" not in argv[1:] and "--verbose" not in argv[1:]:
        return argv
    return [argv[0], *[a for a in argv[1:] if a not in ("-v", "--verbose")], "log.verbose=true"]


def duration(seconds: float) -> str:
    """A duration as a person reads it: ``0.3 s``, ``45 s``, ``12 min``, ``3.4 h``."""
    if seconds < 9.95:  # tenths, or a short run's estimate reads "0 s"
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class ConsoleFormatter(logging.Formatter):
    """``[17:28:39] message`` on the console (the run's bench.log keeps dates and logger names);
    a warning or an error says so: ``[17:28:39] warning: ...``."""

    def __init__(self) -> None:
        super().__init__("[%(asctime)s] %(message)s", datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING:
            stamp, _, message = text.partition("] ")
            text = f"{stamp}] {record.levelname.lower()}: {message}"
        return text


class ConsoleHandler(logging.StreamHandler):
    """A console handler that writes around tqdm's bars (``tqdm.write``) so a bar is never split
    by a log line; plain ``StreamHandler`` behaviour when no bar is open."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream if stream is not None else sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(record, "console", True):  # said on the console another way (an `error:` line)
            return
        try:
            from tqdm import tqdm

            if getattr(tqdm, "_instances", None):
                tqdm.write(self.format(record), file=self.stream)
                return
        except Exception:  # the bar is a nicety: never lose a line for it
            pass
        super().emit(record)


def output_is_terminal() -> bool:
    """Whether the run's output goes to a terminal (a progress bar helps there, not in logs)."""
    return sys.stderr.isatty()
