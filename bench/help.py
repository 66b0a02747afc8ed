"""``python -m bench --help`` without importing the training stack (Lightning, PyTorch): the help
text is Hydra's, from ``conf/hydra/help/bench.yaml`` and the config groups, so composing the
configuration's defaults is all it needs. About 1 s instead of the ~5 s a run's imports take."""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

#: the same folder as bench.composition.CONFIG_DIR (not imported: it brings the records and torch)
CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")
HELP_FLAGS = ("-h", "--help", "--hydra-help")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def _help(cfg: DictConfig) -> None:  # pragma: no cover - Hydra prints the help and exits before calling it
    return None


def wants_help(argv: list[str]) -> bool:
    return any(a in HELP_FLAGS for a in argv[1:])


def show_help() -> None:
    """Print Hydra's help (bench's template) for the command line in ``sys.argv`` and return."""
    import os
    import sys

    try:
        _help()
    except BrokenPipeError:  # `python -m bench --help | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
