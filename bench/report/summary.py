"""Seed summaries: at the end of a sweep, mean, std and the Student-t interval per
configuration and test metric, and the runs that did not complete.

The table is the report's (:func:`bench.report.tables.build` without a baseline): runs are
grouped into configurations once, by :func:`bench.report.runs.assign_labels`. A Hydra
callback writes ``summary.csv`` and ``summary.md`` into the sweep directory; the
functions work on any directory of runs.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from bench.report.runs import RunRecord, assign_labels, from_results
from bench.report.tables import build
from bench.results import COMPLETED, RunResult, atomic_write_bytes, find_runs, variant_overrides

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


def to_markdown(summary: pd.DataFrame, runs: list[RunResult], headline: Iterable[str] = HEADLINE) -> str:
    """Markdown: a headline table (configurations x headline metrics), the full table, and
    the runs that did not complete."""
    lines = ["# Seed summary", "", "mean ± 95% CI half-width (Student t, n seeds)", ""]
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
    return "\n".join(lines) + "\n"


def write_summary(root: Path, confidence: float = 0.95) -> tuple[list[RunResult], pd.DataFrame, str]:
    """Read every run under ``root`` and write ``summary.csv`` and ``summary.md`` there."""
    runs, notes = find_runs([root])
    for note in notes:
        log.warning("%s", note)
    summary, _ = summarize(runs, confidence)
    markdown = to_markdown(summary, runs)
    atomic_write_bytes(Path(root) / "summary.csv", summary.to_csv(index=False).encode())
    atomic_write_bytes(Path(root) / "summary.md", markdown.encode())
    return runs, summary, markdown


class SeedSummaryCallback(Callback):
    """Hydra callback: at the end of a multirun, summarise every job of the sweep.

    Failed jobs are listed (they do not stop the sweep: the task function records them);
    the process then exits with status 1 so that scripts notice.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        root = Path(config.hydra.sweep.dir)
        runs, summary, markdown = write_summary(root)
        print(markdown)
        print(f"seed summary: {root / 'summary.md'} and {root / 'summary.csv'}")
        if "wandb" in (config.get("logger") or {}) and len(summary):
            _log_summary_to_wandb(config, runs, summary)
        bad = [r for r in runs if r.status != COMPLETED]
        if bad:
            print(f"{len(bad)} of {len(runs)} jobs did not complete; see the list above", file=sys.stderr)
            sys.exit(1)


def wandb_summary_fields(summary: pd.DataFrame) -> dict[str, float]:
    """Flat W&B summary fields of one configuration: ``<metric>/{mean,std,ci_low,ci_high,ci_half,n}``."""
    fields: dict[str, float] = {}
    for r in summary.itertuples():
        for stat in ("mean", "std", "ci_low", "ci_high", "ci_half", "n"):
            fields[f"{r.metric}/{stat}"] = getattr(r, stat)
    return fields


def _log_summary_to_wandb(config: DictConfig, runs: list[RunResult], summary: pd.DataFrame) -> None:
    """One ``job_type=summary`` run per configuration, in the W&B group of its seeds: the CI
    table (``seed_summary``) and per-metric fields (``ndcg@20/mean``, ``ndcg@20/ci_low``, ...)."""
    try:
        import wandb

        from bench.loggers import resolve_wandb_mode

        spec = config.logger.wandb
        mode: Any = resolve_wandb_mode(spec.get("mode", "auto"))[0]
        _, records = summarize(runs)
        by_source = {str(r.run_dir): r for r in runs}
        for (task, dataset, model, row), group in summary.groupby(["task", "dataset", "model", "row"], sort=False):
            members = [by_source[rec.source] for rec in records
                       if (rec.task, rec.dataset, rec.model, rec.label) == (task, dataset, model, row)]
            first = members[0].config
            wb = (first.get("logger") or {}).get("wandb") or {}
            configuration = " ".join([f"{dataset}-{model}-{members[0].loss}", *variant_overrides(members[0].overrides)])
            run_group = wb.get("group") or configuration
            table = group.drop(columns=["row"]).assign(configuration=configuration, group=run_group)
            run = wandb.init(project=spec.project, entity=spec.get("entity"), job_type="summary", group=run_group,
                             name=f"summary-{run_group}", mode=mode, dir=str(config.hydra.sweep.dir), reinit=True,
                             tags=["summary", *[t for t in wb.get("tags", []) if not str(t).startswith("seed")]],
                             config={"configuration": configuration, "dataset": dataset, "model": model,
                                     "loss": members[0].loss, "seeds": sorted(m.seed for m in members),
                                     "sweep_dir": str(config.hydra.sweep.dir)})
            run.log({"seed_summary": wandb.Table(dataframe=table)})
            run.summary.update(wandb_summary_fields(group))
            run.finish()
    except Exception as exc:  # the summary files are written already; W&B is a bonus
        log.warning("could not log the seed summary to W&B: %s", exc)
