"""Running a study's jobs in N local lanes (one process each, the cores shared out), resumable
across sittings and machines through the ledgers (on a SLURM cluster: :mod:`bench.study.slurm`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from bench.parallel import cpu_count, others_running, oversubscription
from bench.records import COMPLETED, RunResult, find_runs
from bench.records.configuration import setting_of
from bench.records.ledger import find_row, keep_per_user, ledger_row, read_ledger, update_ledger
from bench.records.lock import holder_alive, holder_name
from bench.resumable import finish_recorded
from bench.study.plan import FINAL, Job, plan
from bench.study.spec import Study


def validation_at(res: RunResult, metric: str, epochs: int) -> float:
    """The validation ``metric`` at the last validation within the first ``epochs`` epochs (after
    early stopping, the last one held); NaN when the run was set to fewer epochs (epochs count from 0)."""
    if int((res.config.get("trainer") or {}).get("max_epochs", 0)) < epochs:
        return math.nan
    rows = [h for h in res.history if h.get("epoch", math.inf) < epochs and f"val/{metric}" in h]
    return float(rows[-1][f"val/{metric}"]) if rows else math.nan


def extra_columns(study: Study) -> Callable[[RunResult], Mapping[str, float]] | None:
    """The ledger's extra columns of a finished run, as the study asks: ``ref/<metric>`` (its best
    model tested again under ``study.ref``'s overrides: the SL@K reference code's protocol, say) and
    ``curve/val_<metric>_e<E>`` (points of its validation curve)."""
    if not study.ref and not study.curve:
        return None

    def columns(res: RunResult) -> dict[str, float]:
        out: dict[str, float] = {}
        if study.curve:
            for e in study.curve["epochs"]:
                out[f"curve/val_{study.curve['metric']}_e{e}"] = validation_at(res, study.curve["metric"], e)
        if study.ref:
            from bench.analysis.checkpoints import retest

            _, per_user, _ = retest(res, list(study.ref["overrides"]))
            out.update({f"ref/{m}": float(per_user[m].mean()) for m in study.ref["metrics"] if m in per_user})
        return out

    return columns


def say_elsewhere(elsewhere: Mapping[Path, Job], say: Callable[[str], None]) -> None:
    """Name the runs left to other runners (another ``run`` of the study, on this machine or another sharing
    ``--runs``) that are still running: their runners record them, and what they finish may let more start."""
    for job in elsewhere.values():
        if holder_alive(job.folder):
            say(f"running elsewhere: {job.table} {job.row} {job.stage} seed {job.seed} ({holder_name(job.folder)}, "
                f"{job.folder}); its runner records it: run this again after it ends for what it lets start")


def run_lanes(study: Study, runs: Path, lanes: int = 1, stages: tuple[str, ...] = ("tune", FINAL),
              tables: list[str] | None = None, rows: list[str] | None = None,
              say: Callable[[str], None] = print) -> int:
    """Run what the plan offers, ``lanes`` runs at a time (each with cores / lanes torch threads),
    each into its ledger, until nothing is left that can start: a run that ends settles the next
    (the last trial of SL's grid lets SL@K's start; a row's choice, its reported runs). Each run is
    tried once per call; with lanes > 1 its output goes to ``<folder>.log``. A run whose folder another
    live process holds (a second runner of the study, here or on a machine sharing ``runs``) is left to
    it, so that runners may share a study. Returns the runs tried."""
    threads = max(1, cpu_count() // max(1, lanes))
    env = {"OMP_NUM_THREADS": str(threads)}
    warning = oversubscription(others_running(), cpu_count(), lanes, threads)
    if warning:
        say(f"warning: {warning}; pin this study to free cores (taskset -c ...) or give it more --lanes (fewer "
            "threads each)")
    extra = extra_columns(study)
    tried: set[Path] = set()
    elsewhere: dict[Path, Job] = {}
    running: dict[Future, Job] = {}
    with ThreadPoolExecutor(max_workers=max(1, lanes)) as pool:
        while True:
            blocked: list[str] = []
            for job in plan(study, runs, stages, tables, rows, blocked):
                if len(running) >= lanes:
                    break
                if job.folder in tried or any(j.folder == job.folder for j in running.values()):
                    continue
                if holder_alive(job.folder):  # another runner's
                    elsewhere[job.folder] = job
                    continue
                tried.add(job.folder)
                log = job.folder.with_name(job.folder.name + ".log") if lanes > 1 else None
                say(f"start {job.table} {job.row} {job.stage} seed {job.seed}: {job.folder}")
                running[pool.submit(finish_recorded, job.folder, list(job.overrides), job.ledger, job.one_setting,
                                    extra if job.stage == FINAL else None, log,
                                    study.per_user if job.stage == FINAL else (), env)] = job
            if not running:
                say_elsewhere(elsewhere, say)
                for why in dict.fromkeys(blocked):
                    say(f"waiting: {why}")
                return len(tried)
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                say(f"{future.result()} {job.table} {job.row} {job.stage} seed {job.seed}: {job.folder}")


def record_finished(study: Study, folder: Path, ledger: Path, one_setting: bool) -> int:
    """Record every completed run under ``folder`` that ``ledger`` lacks; the number recorded."""
    if not folder.exists():
        return 0
    runs, _ = find_runs([folder])
    held = read_ledger(ledger)
    extra = extra_columns(study) if one_setting else None
    added = 0
    for res in runs:
        if res.status != COMPLETED or find_row(held, res.job_overrides) is not None:
            continue
        update_ledger(ledger, [ledger_row(res, extra(res) if extra else None)], one_setting)
        if one_setting and study.per_user:
            keep_per_user(ledger, res, study.per_user)
        added += 1
    return added


def same_setting(a: list[str], b: list[str]) -> bool:
    return setting_of(a) == setting_of(b)
