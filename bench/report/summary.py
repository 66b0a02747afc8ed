"""Seed summaries: at the end of a sweep, mean, std and the Student-t interval per
configuration and test metric, and the runs that did not complete.

The table is the report's (:func:`bench.report.tables.build` without a baseline): runs are
grouped into configurations once, by :func:`bench.report.runs.assign_labels`. The sweep's Hydra
callback (:class:`bench.sweep.SweepCallback`) writes ``summary.csv`` and ``summary.md`` into the
sweep directory; the functions work on any directory of runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from bench.records import COMPLETED, RunResult, atomic_write_bytes, find_runs
from bench.report.runs import RunRecord, assign_labels, from_results
from bench.report.tables import build

log = logging.getLogger(__name__)

HEADLINE = ("recall@20", "ndcg@20")
COLUMNS = ["task", "dataset", "model", "row", "metric", "n", "mean", "std", "ci_low", "ci_high", "ci_half", "seeds"]


def summarize(runs: list[RunResult], confidence: float = 0.95) -> tuple[pd.DataFrame, list[RunRecord]]:
    """Per configuration (task, dataset, model, row) and test metric of the completed runs:
    n, mean, std, CI and the seeds. Returns (summary, the records it was built from)."""
    records, _ = from_results(runs)
    assign_labels(records)
    metrics = list(dict.fromkeys(m for r in records for m in r.test))
    if not records:
        return pd.DataFrame(columns=COLUMNS), records
    table, _ = build(records, metrics, None, confidence)
    return table[COLUMNS].reset_index(drop=True), records


def _fmt(mean: float, half: float, n: int) -> str:
    return f"{mean:.4f} ± {half:.4f} (n={n})" if n > 1 else f"{mean:.4f} (n={n})"


def to_markdown(summary: pd.DataFrame, runs: list[RunResult], headline: Iterable[str] = HEADLINE,
                not_run: Iterable[str] = ()) -> str:
    """Markdown: a headline table (configurations x headline metrics), the full table, the runs
    that did not complete, and ``not_run``: the sweep's jobs that did not run (one line each)."""
    legend = "mean ± 95% CI half-width (Student t, n seeds)"
    if len(summary) and (summary["n"] == 1).any():
        legend += "; (n=1) is one seed's value, with no interval until more seeds run"
    lines = ["# Seed summary", "", legend, ""]
    # and the metric the runs picked their checkpoints by, when another (NDCG@5 in learning to rank)
    monitors = [r.monitor for r in runs if r.status == COMPLETED]
    headline = list(dict.fromkeys([*headline, *monitors]))
    headline = [m for m in headline if m in set(summary["metric"])]
    if len(summary):
        lines += ["| data · model | configuration | " + " | ".join(headline) + " |",
                  "|---|---|" + "---|" * len(headline)]
        for (task, dataset, model, row), group in summary.groupby(["task", "dataset", "model", "row"], sort=False):
            by = group.set_index("metric")
            where = f"{dataset} · {model}" + ("" if task == "cf" else f" ({task})")
            lines.append(f"| {where} | {row} | " + " | ".join(
                _fmt(by.at[m, "mean"], by.at[m, "ci_half"], int(by.at[m, "n"])) for m in headline) + " |")
        lines += ["", "## All metrics", "", "| data · model | configuration | metric | n | mean | std | 95% CI |",
                  "|---|---|---|---|---|---|---|"]
        for r in summary.itertuples():
            lines.append(f"| {r.dataset} · {r.model} | {r.row} | {r.metric} | {r.n} | {r.mean:.4f} | {r.std:.4f} | "
                         f"[{r.ci_low:.4f}, {r.ci_high:.4f}] |")
    failed = [r for r in runs if r.status != COMPLETED]
    if failed:
        lines += ["", "## Runs that did not complete", ""]
        for r in failed:
            lines.append(f"- {r.run_dir} ({' '.join(r.variant) or 'no overrides'}, seed {r.seed}): "
                         f"{r.live_status()}" + (f": {r.error}" if r.error else ""))
    not_run = list(not_run)
    if not_run:
        lines += ["", "## Jobs of this sweep that did not run", "", *(f"- {line}" for line in not_run)]
    return "\n".join(lines) + "\n"


def write_summary(root: Path, confidence: float = 0.95, runs: list[RunResult] | None = None,
                  not_run: Iterable[str] = (), name: str = "summary") -> tuple[list[RunResult], pd.DataFrame, str]:
    """Summarise ``runs`` (default: every run under ``root``) into ``<name>.csv`` and ``<name>.md``
    there; ``not_run`` lists jobs that did not run."""
    if runs is None:
        runs, notes = find_runs([root])
        for note in notes:
            log.warning("%s", note)
    summary, _ = summarize(runs, confidence)
    markdown = to_markdown(summary, runs, not_run=not_run)
    atomic_write_bytes(Path(root) / f"{name}.csv", summary.to_csv(index=False).encode())
    atomic_write_bytes(Path(root) / f"{name}.md", markdown.encode())
    return runs, summary, markdown


def _same_job(run: RunResult, job: list[str]) -> bool:
    return set(run.job_overrides) == set(job)


def jobs_not_run(mine: list[RunResult], others: list[RunResult], jobs: list[list[str]] | None) -> list[str]:
    """One line per job of the sweep that left no run of its own: a folder another run held (a
    sweep rerun into the same folder), or a job that failed before writing anything."""
    lines = [f"{r.run_dir}: not run by this sweep; the folder holds a {r.live_status()} run started "
             f"{r.started_at or 'at an unknown time'} (pass force=true, or another hydra.sweep.dir, to run it)"
             for r in others]
    if jobs is not None:
        started = [j for j in jobs if any(_same_job(r, j) for r in mine)]
        missing = [j for j in jobs if j not in started]
        held = {tuple(sorted(r.job_overrides)) for r in others}
        lines += [f"job {jobs.index(j)} ({' '.join(j)}): no run of it in the sweep folder (see its log)"
                  for j in missing if tuple(sorted(j)) not in held]
    return lines


def wandb_summary_fields(summary: pd.DataFrame) -> dict[str, float]:
    """Flat W&B summary fields of one configuration: ``<metric>/{mean,std,ci_low,ci_high,ci_half,n}``."""
    fields: dict[str, float] = {}
    for r in summary.itertuples():
        for stat in ("mean", "std", "ci_low", "ci_high", "ci_half", "n"):
            fields[f"{r.metric}/{stat}"] = getattr(r, stat)
    return fields
