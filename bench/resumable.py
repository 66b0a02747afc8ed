"""Bring one run folder to a completed run, across interruptions: the building block of the
benchmark scripts whose studies outlast one sitting (each stage can be rerun until it is done)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bench.errors import ConfigError
from bench.records.configuration import override_key
from bench.records.ledger import find_row, keep_per_user, ledger_row, read_ledger, update_ledger
from bench.records.schema import CHECKPOINT_DIR, COMPLETED, RESULTS_FILE, RunResult


def finish_run(folder: Path, overrides: Sequence[str], log: Path | None = None,
               env: Mapping[str, str] | None = None) -> str:
    """Make ``folder`` hold a completed run of ``overrides`` (``python -m bench`` in a subprocess).

    A completed run of these overrides is kept; an interrupted one with a ``last.ckpt`` is resumed
    (``resume=``). Anything else in the folder, including a run of other overrides, is replaced by
    a fresh start. Returns what was done: ``"kept"``, ``"resumed"`` or ``"started"``. A failing run
    is reported in its own ``results.json``; the caller moves on to the next one. ``log``: a file the
    run's output is appended to instead of this process's (runs side by side would interleave theirs);
    ``env``: variables to set for the run (``OMP_NUM_THREADS`` of a lane).
    """
    res = RunResult.read(folder) if (folder / RESULTS_FILE).exists() else None
    same = res is not None and _settings(res.job_overrides) == _settings(overrides)
    if same and res is not None and res.status == COMPLETED:
        return "kept"
    if same and (folder / CHECKPOINT_DIR / "last.ckpt").exists():
        cmd, action = [sys.executable, "-m", "bench", f"resume={override_value(folder)}"], "resumed"
    else:
        cmd = [sys.executable, "-m", "bench", *overrides, f"hydra.run.dir={override_value(folder)}", "force=true"]
        action = "started"
    print("+", " ".join(cmd), flush=True)
    environment = {**os.environ, **env} if env else None
    if log is None:
        done = subprocess.run(cmd, check=False, env=environment)
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            done = subprocess.run(cmd, check=False, stdout=out, stderr=subprocess.STDOUT, env=environment)
    if done.returncode and not (folder / RESULTS_FILE).exists():
        # it failed before writing anything (a bad override, a crash at start): say so here, or
        # the caller's loop would go on as if the run had been tried
        print(f"! {folder}: the run exited with status {done.returncode} before writing {RESULTS_FILE}; "
              f"its error is {'above' if log is None else f'in {log}'}", flush=True)
    return action


def holds_completed(folder: Path, overrides: Sequence[str]) -> bool:
    """Whether ``folder`` holds a completed run of ``overrides`` (the settings that make it, not where it
    wrote or whether it might overwrite)."""
    if not (folder / RESULTS_FILE).exists():
        return False
    res = RunResult.read(folder)
    return res.status == COMPLETED and _settings(res.job_overrides) == _settings(overrides)


def finish_recorded(folder: Path, overrides: Sequence[str], ledger: Path, one_setting: bool = True,
                    extra: Callable[[RunResult], Mapping[str, float]] | None = None, log: Path | None = None,
                    per_user: Sequence[str] = (), env: Mapping[str, str] | None = None) -> str:
    """:func:`finish_run`, unless the ledger already holds this run; a run it completes
    (or finds completed) goes into the ledger, with ``extra(result)``'s columns (:func:`ledger_row`)
    and, with ``per_user`` (one-setting ledgers), those per-user test metrics (:func:`keep_per_user`).
    Returns ``"ledger"``, or what ``finish_run`` did (``log``: see there)."""
    if find_row(read_ledger(ledger), overrides) is not None:
        return "ledger"
    action = finish_run(folder, overrides, log, env)
    res = RunResult.read(folder) if (folder / RESULTS_FILE).exists() else None
    if res is not None and res.status == COMPLETED:
        update_ledger(ledger, [ledger_row(res, extra(res) if extra else None)], one_setting)
        if per_user:
            keep_per_user(ledger, res, per_user)
    return action


def override_value(path: Path | str) -> str:
    """``path`` as a Hydra override value: quoted when it holds a character the override grammar
    reads as syntax (``tau=0.05``, spaces, brackets, commas), unchanged otherwise.

    >>> override_value("/runs/sl/tau=0.05")
    "'/runs/sl/tau=0.05'"
    """
    text = str(path)
    if re.fullmatch(r"[\w./:~+@%-]*", text):
        return text
    for quote in ("'", '"'):
        if quote not in text and not text.endswith("\\"):
            return f"{quote}{text}{quote}"
    raise ConfigError(f"cannot pass the folder {text!r} to Hydra: it holds both quote characters; "
                      "choose an output folder without them")


def _settings(overrides: Sequence[str]) -> set[str]:
    """The overrides that say what a run is (not where it writes or whether it may overwrite)."""
    return {o for o in overrides if not o.startswith("hydra") and override_key(o) != "force"}
