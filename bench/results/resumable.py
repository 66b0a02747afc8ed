"""Bring one run folder to a completed run, across interruptions: the building block of the
benchmark scripts whose studies outlast one sitting (each stage can be rerun until it is done)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.results.schema import CHECKPOINT_DIR, COMPLETED, RESULTS_FILE, RunResult


def finish_run(folder: Path, overrides: Sequence[str]) -> str:
    """Make ``folder`` hold a completed run of ``overrides`` (``python -m bench`` in a subprocess).

    A completed run is kept; an interrupted one with a ``last.ckpt`` is resumed (``resume=``,
    which checks that its overrides still match); anything else in the folder is replaced by a
    fresh start. Returns what was done: ``"kept"``, ``"resumed"`` or ``"started"``. A failing run
    is reported in its own ``results.json``; the caller moves on to the next one.
    """
    if (folder / RESULTS_FILE).exists() and RunResult.read(folder).status == COMPLETED:
        return "kept"
    if (folder / CHECKPOINT_DIR / "last.ckpt").exists():
        cmd, action = [sys.executable, "-m", "bench", f"resume={folder}"], "resumed"
    else:
        cmd = [sys.executable, "-m", "bench", *overrides, f"hydra.run.dir={folder}", "force=true"]
        action = "started"
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=False)
    return action
