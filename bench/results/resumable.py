"""Bring one run folder to a completed run, across interruptions: the building block of the
benchmark scripts whose studies outlast one sitting (each stage can be rerun until it is done)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.results.schema import CHECKPOINT_DIR, COMPLETED, RESULTS_FILE, RunResult, override_key


def finish_run(folder: Path, overrides: Sequence[str]) -> str:
    """Make ``folder`` hold a completed run of ``overrides`` (``python -m bench`` in a subprocess).

    A completed run of these overrides is kept; an interrupted one with a ``last.ckpt`` is resumed
    (``resume=``). Anything else in the folder, including a run of other overrides, is replaced by
    a fresh start. Returns what was done: ``"kept"``, ``"resumed"`` or ``"started"``. A failing run
    is reported in its own ``results.json``; the caller moves on to the next one.
    """
    res = RunResult.read(folder) if (folder / RESULTS_FILE).exists() else None
    same = res is not None and _settings(res.job_overrides) == _settings(overrides)
    if same and res is not None and res.status == COMPLETED:
        return "kept"
    if same and (folder / CHECKPOINT_DIR / "last.ckpt").exists():
        cmd, action = [sys.executable, "-m", "bench", f"resume={folder}"], "resumed"
    else:
        cmd = [sys.executable, "-m", "bench", *overrides, f"hydra.run.dir={folder}", "force=true"]
        action = "started"
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=False)
    return action


def _settings(overrides: Sequence[str]) -> set[str]:
    """The overrides that say what a run is (not where it writes or whether it may overwrite)."""
    return {o for o in overrides if not o.startswith("hydra") and override_key(o) != "force"}
