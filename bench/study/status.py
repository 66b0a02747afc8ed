"""Where a study stands: per table and row, the runs its ledgers hold, those running now, those
left (and those waiting on a choice), and how long the rest will take at N lanes."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from bench.console import duration
from bench.records import RESULTS_FILE, RUNNING, RunResult
from bench.records.ledger import read_ledger
from bench.study.plan import FINAL, TUNE, Recorded, plan
from bench.study.spec import Study


def _fit_seconds(study: Study) -> dict[tuple[str, str, str], list[float]]:
    """The recorded fit seconds of every run the study's ledgers hold, by (table, row, stage)."""
    out: dict[tuple[str, str, str], list[float]] = {}
    for job in plan(study, Path("/nonexistent"), done=True):
        for row in read_ledger(job.ledger):
            value = row.get("fit_s")
            if isinstance(value, int | float) and not math.isnan(value):
                out.setdefault((job.table, job.row, job.stage), []).append(float(value))
    return out


def status(study: Study, runs: Path, lanes: int = 1) -> str:
    """A markdown table: per table, row and stage, runs done / running / left, and the time left."""
    jobs = plan(study, runs, done=True)
    blocked: list[str] = []
    plan(study, runs, blocked=blocked)
    times = _fit_seconds(study)
    every = [t for ts in times.values() for t in ts]
    recorded = Recorded(study)
    counts: dict[tuple[str, str, str], dict[str, int]] = {}
    left_seconds = 0.0
    unknown = 0
    for job in jobs:
        key = (job.table, job.row, job.stage)
        c = counts.setdefault(key, {"done": 0, "running": 0, "left": 0})
        if recorded.holds(job):
            c["done"] += 1
            continue
        live = (job.folder / RESULTS_FILE).is_file() and RunResult.read(job.folder).live_status() == RUNNING
        c["running" if live else "left"] += 1
        typical = times.get(key) or every
        if typical:
            left_seconds += statistics.median(typical)
        else:
            unknown += 1
    lines = [f"# {study.name}: {study.title}", "", "| table | row | stage | done | running | left |",
             "|---|---|---|---|---|---|"]
    for (table, row, stage), c in counts.items():
        lines.append(f"| {table} | {row} | {stage} | {c['done']} | {c['running']} | {c['left']} |")
    waiting = _waiting_trials(study, runs)
    total = {k: sum(c[k] for c in counts.values()) for k in ("done", "running", "left")}
    lines += ["", f"{total['done']} done, {total['running']} running, {total['left']} left"
              + (f" (and {waiting} tuning-dependent runs not planned yet)" if waiting else "")]
    if total["left"]:
        estimate = f"about {duration(left_seconds / max(1, lanes))} at {lanes} lane(s)" if left_seconds else "unknown"
        lines.append(f"time left: {estimate}" + (f"; {unknown} run(s) with no timing yet" if unknown and left_seconds
                                                 else "") + " (the median recorded fit of each row, or of the study)")
    for why in dict.fromkeys(blocked):
        lines.append(f"waiting: {why}")
    return "\n".join(lines) + "\n"


def _waiting_trials(study: Study, runs: Path) -> int:
    """Reported runs of rows whose setting is not chosen yet (they are not in the plan)."""
    if study.tune is None:
        return 0
    planned = {(j.table, j.row) for j in plan(study, runs, (FINAL,), done=True)}
    return sum(len(study.seeds_of(t, r)) * len(study.replicate_values()) for t in study.tables
               for r in study.tune.rows if (t, r) not in planned and r in study.rows_of(t)) if TUNE else 0
