"""What a study still has to run, in order: each row's tuning trials (once the rows it inherits
from have chosen), then its reported runs (once it has chosen), table by table, seed-major."""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.records.configuration import setting_of
from bench.records.ledger import find_row, read_ledger
from bench.study.spec import Study

TUNE, FINAL = "tune", "final"


class NotChosen(Exception):
    """A row's setting is not chosen yet (its tuning, or a row it inherits from, is not finished)."""


@dataclass(frozen=True)
class Job:
    """One run of a study: where it runs, what makes it, and the ledger that records it."""

    table: str
    row: str
    stage: str
    seed: int
    replicate: tuple[tuple[str, Any], ...]
    overrides: tuple[str, ...]
    ledger: Path
    folder: Path

    @property
    def one_setting(self) -> bool:
        """A reported row's ledger holds its one setting; a tuning ledger holds every trial's."""
        return self.stage == FINAL


def _tag(text: str) -> str:
    return re.sub(r"[^\w.=-]+", "_", text).strip("_") or "default"


def _value(overrides: list[str], key: str) -> str | None:
    return next((o.split("=", 1)[1] for o in reversed(overrides) if o.lstrip("+").split("=", 1)[0] == key), None)


def base_overrides(study: Study, table: str, row: str) -> list[str]:
    """A row's overrides in a table, before its tuned setting, replicate and seed."""
    return [*study.tables[table], *study.rows[row], *study.common]


def trial_overrides(study: Study, table: str, row: str, trial: list[str]) -> list[str]:
    assert study.tune is not None
    replicate = [f"{k}={v}" for k, v in study.tune.replicate.items()]
    return [*base_overrides(study, table, row), *trial, *replicate, *study.placement]


def trials(study: Study, table: str, row: str) -> list[list[str]]:
    """The row's tuning trials in ``table``; raises NotChosen while a row it inherits from is not chosen."""
    assert study.tune is not None
    spec = study.tune.rows[row]
    inherited = {}
    for key, (source, source_key) in spec.inherit.items():
        setting = chosen(study, table, source)[0]
        value = _value(setting, source_key)
        if value is None:
            raise NotChosen(f"{table} {row}: {source}'s choice sets no {source_key}")
        inherited[key] = value
    return spec.trials(inherited)


def _recorded_trials(study: Study, table: str, row: str) -> dict[str, float]:
    """Trial setting (space-joined) -> validation value from the committed tuning record (``tuning.csv``),
    for trials whose run folders and tune-ledger rows are gone."""
    if not study.tuning_record.is_file():
        return {}
    with study.tuning_record.open(newline="") as fh:
        return {_sorted(r["setting"]): float(r["val"]) for r in csv.DictReader(fh)
                if r.get("table") == table and r.get("row") == row and r.get("val") not in (None, "")}


def _sorted(setting: str) -> str:
    """A trial's setting in a fixed order (records may list its overrides in another)."""
    return " ".join(sorted(setting.split()))


def tuning_table(study: Study, table: str, row: str) -> list[dict[str, Any]]:
    """Each trial of the row's current grids with its validation value (None while not run)."""
    assert study.tune is not None
    held = read_ledger(study.tune_ledger(table, row))
    recorded = _recorded_trials(study, table, row)
    out = []
    for trial in trials(study, table, row):
        found = find_row(held, trial_overrides(study, table, row, trial))
        value = found.get(f"val/{study.tune.metric}") if found is not None else recorded.get(_sorted(" ".join(trial)))
        out.append({"table": table, "row": row, "setting": " ".join(trial),
                    "val": float(value) if isinstance(value, int | float) else None,
                    "best_epoch": found.get("best_epoch") if found is not None else ""})
    return out


def chosen(study: Study, table: str, row: str) -> tuple[list[str], list[dict[str, Any]]]:
    """(the row's setting, its tuning table): [] for an untuned row, else the trial of the best
    validation value over its whole current grid.

    Raises:
        NotChosen: the grid is not finished (or a row it inherits from is not).
    """
    if study.tune is None or row not in study.tune.rows:
        return [], []
    table_rows = tuning_table(study, table, row)
    left = [t["setting"] for t in table_rows if t["val"] is None]
    if left:
        raise NotChosen(f"{table} {row}: tuning not finished ({len(left)} of {len(table_rows)} trials left)")
    best = max(table_rows, key=lambda t: t["val"])  # the first maximum, in grid order
    return best["setting"].split(), table_rows


def final_overrides(study: Study, table: str, row: str, setting: list[str], replicate: Mapping[str, Any],
                    seed: int) -> list[str]:
    return [*base_overrides(study, table, row), *setting, *(f"{k}={v}" for k, v in replicate.items()),
            f"seed={seed}", *study.placement]


def plan(study: Study, runs: Path, stages: tuple[str, ...] = (TUNE, FINAL), tables: list[str] | None = None,
         rows: list[str] | None = None, blocked: list[str] | None = None, done: bool = False) -> list[Job]:
    """The study's runs that its ledgers do not hold (all of them with ``done``) and whose inputs are
    settled, in order: table by table; in each, the tuning trials (rows in declaration order: a row
    another inherits from comes first), then the reported runs seed-major (every row gets a first
    seed before any gets a second). ``blocked`` collects why the others must wait."""
    blocked = blocked if blocked is not None else []
    jobs: list[Job] = []
    for table in tables or list(study.tables):
        if TUNE in stages and study.tune is not None:
            for row in [r for r in study.tune.rows if (not rows or r in rows) and r in study.rows_of(table)]:
                try:
                    row_trials = trials(study, table, row)
                except NotChosen as why:
                    blocked.append(str(why))
                    continue
                for trial in row_trials:
                    folder = runs / study.name / table / TUNE / row / _tag(" ".join(trial))
                    jobs.append(Job(table, row, TUNE, int(study.tune.replicate.get("seed", 0)), (),
                                    tuple(trial_overrides(study, table, row, trial)), study.tune_ledger(table, row),
                                    folder))
        if FINAL not in stages:
            continue
        every = sorted({s for r in study.rows_of(table) for s in study.seeds_of(table, r)})
        for seed in every:
            for replicate in study.replicate_values():
                for row in [r for r in study.rows_of(table) if (not rows or r in rows)
                            and seed in study.seeds_of(table, r)]:
                    try:
                        setting = chosen(study, table, row)[0]
                    except NotChosen as why:
                        if TUNE not in stages:
                            blocked.append(str(why))
                        continue
                    tag = "".join(f"{k.rsplit('.', 1)[-1]}{v}-" for k, v in replicate.items())
                    folder = runs / study.name / table / FINAL / row / f"{tag}seed{seed}"
                    jobs.append(Job(table, row, FINAL, seed, tuple(replicate.items()),
                                    tuple(final_overrides(study, table, row, setting, replicate, seed)),
                                    study.ledger(table, row, replicate), folder))
    if done:
        return jobs
    recorded = Recorded(study)
    return [j for j in jobs if not recorded.holds(j)]


class Recorded:
    """What a study's records hold: its ledgers' rows (each read once), and the tuning trials of its
    tuning record (``tuning.csv``, which stands in for tune ledgers whose rows are gone)."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self._ledgers: dict[Path, list] = {}
        self._trials: dict[tuple[str, str], dict[str, float]] = {}

    def holds(self, job: Job) -> bool:
        rows = self._ledgers.setdefault(job.ledger, read_ledger(job.ledger))
        if find_row(rows, job.overrides) is not None:
            return True
        if job.stage != TUNE:
            return False
        trials = self._trials.setdefault((job.table, job.row), _recorded_trials(self.study, job.table, job.row))
        return _sorted(_trial_of(self.study, job)) in trials


def _trial_of(study: Study, job: Job) -> str:
    """The trial setting of a tuning job (its overrides without the row's base, replicate and placement)."""
    skip = len(base_overrides(study, job.table, job.row))
    tail = len(study.tune.replicate) + len(study.placement) if study.tune else 0
    return " ".join(job.overrides[skip:len(job.overrides) - tail])


def setting_key(job: Job) -> str:
    """The ledger's key of a job's configuration (what :func:`bench.records.configuration.setting_of` makes)."""
    return setting_of(job.overrides)
