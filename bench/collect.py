"""Runs and ledger rows found on disk, as the report's records: the run folders (read as
records) and the rows of every run ledger, whose settings are composed again from this code's
``conf/`` for their names (so this sits above the report, beside composition)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.composition import check_replayable, compose
from bench.errors import BenchError
from bench.records import RESULTS_FILE, find_runs
from bench.records.ledger import LEDGER_FILE, read_ledger
from bench.report.runs import RunRecord, from_ledger, from_results, loss_k


def from_directories(paths: Iterable[Path]) -> tuple[list[RunRecord], list[str]]:
    """Completed runs under each path (a run directory or any folder above run directories), and
    the rows of every run ledger (``runs.csv``, :mod:`bench.records.ledger`) there or given.

    Returns:
        (records, notes): notes name the runs left out (failed, running, unreadable).
    """
    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.exists():
            raise BenchError(f"{p} does not exist; pass run or sweep directories, or run ledgers ({LEDGER_FILE})")
    ledgers = {p: [p] if p.is_file() and p.name == LEDGER_FILE else sorted(p.rglob(LEDGER_FILE)) if p.is_dir() else []
               for p in paths}
    runs, notes = find_runs([p for p in paths if not (p.is_file() and p.name == LEDGER_FILE)])
    notes = [n for n in notes if not any(ledgers[p] and n == f"no {RESULTS_FILE} under {p}" for p in paths)]
    records, more = from_results(runs)
    for files in ledgers.values():
        for file in files:
            records += from_ledger_file(file)
    return records, notes + more


def from_ledger_file(path: Path) -> list[RunRecord]:
    """The rows of one run ledger as records (per-user values where the ledger kept them). Each setting
    is composed again from this code's ``conf/`` for its task, data set, backbone, loss, K and
    the paper's values; a row's finish time orders it against run folders of the same seed."""
    rows = read_ledger(path)
    records = []
    for setting in dict.fromkeys(str(r.get("setting", "")) for r in rows):
        cfg = compose_setting(setting.split(), path)
        mine = [r for r in rows if str(r.get("setting", "")) == setting]
        records += from_ledger(mine, str(cfg.task.name), str(cfg.dataset.name), str(cfg.model.name),
                               str(cfg.loss.name), paper=dict(cfg.get("paper") or {}), k=loss_k(cfg),
                               source=str(path), ledger=path)
    return records


def compose_setting(setting: list[str], source: Path | str = "ledger") -> Any:
    """The config of a ledger's setting (overrides without their ``+``: a key the defaults do
    not have gets it back, as Hydra's error names it)."""
    from hydra.errors import ConfigCompositionException

    check_replayable(setting, source)  # a ledger is a record: never code
    overrides = list(setting)
    for _ in range(len(overrides) + 1):
        try:
            return compose([*overrides, "output_dir=unused"])
        except ConfigCompositionException as exc:
            hint = re.search(r"use \+(\S+)", str(exc))
            fixed = hint.group(1) if hint else None
            if fixed is None or fixed not in overrides:
                raise BenchError(f"{source}: its setting {' '.join(setting)!r} does not compose with this "
                                 f"code's conf/ ({str(exc).splitlines()[0]})") from None
            overrides[overrides.index(fixed)] = "+" + fixed
    raise BenchError(f"{source}: its setting {' '.join(setting)!r} does not compose with this code's conf/")
