"""Seed summaries: mean, std and Student-t 95% CI per configuration and metric.

Used by a Hydra callback at the end of a multirun (``summary.csv`` and ``summary.md``
in the sweep directory) and callable on any directory of runs.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from scipy import stats

from bench.results import RESULTS_FILE, atomic_write_bytes, read_json

log = logging.getLogger(__name__)

SEED_KEYS = ("seed",)
HEADLINE = ("recall@20", "ndcg@20")
ALL_RUNS = "(all runs)"  # the configuration key when no override tells runs apart


def t_interval(values: Iterable[float], confidence: float = 0.95) -> dict[str, float]:
    """n, mean, sample std and the Student-t confidence interval of the mean.

    half-width = t(1 - (1 - confidence) / 2, n - 1) * s / sqrt(n); NaN when n < 2.
    """
    x = np.asarray(list(values), dtype=np.float64)
    n = x.size
    mean = float(x.mean()) if n else math.nan
    std = float(x.std(ddof=1)) if n > 1 else math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * std / math.sqrt(n)) if n > 1 else math.nan
    return {"n": n, "mean": mean, "std": std, "ci_low": mean - half, "ci_high": mean + half, "ci_half": half}


def config_key(overrides: Iterable[str], ignore: Iterable[str] = SEED_KEYS) -> str:
    """The overrides that define a configuration: all but the seed, sorted."""
    ignore = set(ignore)
    kept = sorted(o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in ignore)
    return " ".join(kept) if kept else ALL_RUNS


def collect_runs(root: Path) -> pd.DataFrame:
    """One row per run directory under ``root`` that holds a results.json.

    Columns: dir, config, seed, status, error, and ``test/<metric>`` for completed runs.
    ``config`` holds the overrides that differ between runs (those shared by every run
    are in ``DataFrame.attrs["common"]``), so a sweep ``-m loss=bpr,sl seed=0,1,2`` gives
    the configurations ``loss=bpr`` and ``loss=sl``.
    """
    rows = []
    for path in sorted(Path(root).rglob(RESULTS_FILE), key=lambda p: str(p)):
        try:
            res = read_json(path)
        except (OSError, ValueError) as exc:
            rows.append({"dir": str(path.parent), "overrides": [], "seed": None, "status": "unreadable",
                         "error": str(exc)})
            continue
        row: dict[str, Any] = {
            "dir": str(path.parent),
            "overrides": [o for o in res.get("overrides", []) if not o.startswith("hydra.")],
            "seed": (res.get("config") or {}).get("seed"),
            "status": res.get("status", "unknown"),
            "error": res.get("error"),
        }
        for k, v in (res.get("test") or {}).items():
            row[f"test/{k}"] = v
        rows.append(row)
    common = set.intersection(*(set(r["overrides"]) for r in rows)) if rows else set()
    for r in rows:
        r["config"] = config_key([o for o in r.pop("overrides") if o not in common])
    frame = pd.DataFrame(rows)
    frame.attrs["common"] = config_key(common)
    return frame


def summarize(runs: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per configuration and test metric: n, mean, std, CI (completed runs only)."""
    done = runs[runs["status"] == "completed"] if len(runs) else runs
    metric_cols = [c for c in done.columns if c.startswith("test/")]
    out = []
    for cfg, group in done.groupby("config", sort=True):
        for col in metric_cols:
            vals = group[col].dropna()
            out.append({"config": cfg, "metric": col[5:], **t_interval(vals, confidence),
                        "seeds": ",".join(str(s) for s in sorted(group["seed"].dropna().astype(int)))})
    return pd.DataFrame(out)


def _fmt(mean: float, half: float, n: int) -> str:
    return f"{mean:.4f} ± {half:.4f} (n={n})" if n > 1 else f"{mean:.4f} (n={n})"


def to_markdown(summary: pd.DataFrame, runs: pd.DataFrame, headline: Iterable[str] = HEADLINE) -> str:
    """Markdown: a headline table (configs x headline metrics) then the full table."""
    lines = ["# Seed summary", "", "mean ± 95% CI half-width (Student t, n seeds)", ""]
    if runs.attrs.get("common") and runs.attrs["common"] != ALL_RUNS:
        lines += [f"Shared by every run: `{runs.attrs['common']}`", ""]
    headline = [m for m in headline if m in set(summary.get("metric", []))]
    if len(summary):
        lines += ["| config | " + " | ".join(headline) + " |", "|---|" + "---|" * len(headline)]
        for cfg, group in summary.groupby("config", sort=True):
            by = group.set_index("metric")
            lines.append(f"| {cfg} | " + " | ".join(_fmt(by.at[m, 'mean'], by.at[m, 'ci_half'], int(by.at[m, 'n']))
                                                  for m in headline) + " |")
        lines += ["", "## All metrics", "", "| config | metric | n | mean | std | 95% CI |", "|---|---|---|---|---|---|"]
        for r in summary.itertuples():
            lines.append(f"| {r.config} | {r.metric} | {r.n} | {r.mean:.4f} | {r.std:.4f} | "
                         f"[{r.ci_low:.4f}, {r.ci_high:.4f}] |")
    failed = runs[runs["status"] != "completed"] if len(runs) else runs
    if len(failed):
        lines += ["", "## Runs that did not complete", ""]
        for r in failed.itertuples():
            lines.append(f"- {r.dir} ({r.config}, seed {r.seed}): {r.status}: {r.error}")
    return "\n".join(lines) + "\n"


def write_summary(root: Path, confidence: float = 0.95) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Collect runs under ``root`` and write ``summary.csv`` and ``summary.md`` there."""
    runs = collect_runs(root)
    summary = summarize(runs, confidence) if len(runs) else pd.DataFrame()
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
        bad = runs[runs["status"] != "completed"] if len(runs) else runs
        if len(bad):
            print(f"{len(bad)} of {len(runs)} jobs did not complete; see the list above", file=sys.stderr)
            sys.exit(1)


def wandb_summary_fields(summary: pd.DataFrame) -> dict[str, float]:
    """Flat W&B summary fields of one configuration: ``<metric>/{mean,std,ci_low,ci_high,ci_half,n}``."""
    fields: dict[str, float] = {}
    for r in summary.itertuples():
        for stat in ("mean", "std", "ci_low", "ci_high", "ci_half", "n"):
            fields[f"{r.metric}/{stat}"] = getattr(r, stat)
    return fields


def _log_summary_to_wandb(config: DictConfig, runs: pd.DataFrame, summary: pd.DataFrame) -> None:
    """One ``job_type=summary`` run per configuration, in the W&B group of its seeds: the CI
    table (``seed_summary``) and per-metric fields (``ndcg@20/mean``, ``ndcg@20/ci_low``, ...)."""
    try:
        import wandb

        from bench.loggers import resolve_wandb_mode

        spec = config.logger.wandb
        mode, _ = resolve_wandb_mode(spec.get("mode", "auto"))
        done = runs[runs["status"] == "completed"]
        for cfg_key, group in summary.groupby("config", sort=True):
            members = done[done["config"] == cfg_key]
            first = read_json(Path(members["dir"].iloc[0]) / RESULTS_FILE)["config"]
            wb = (first.get("logger") or {}).get("wandb") or {}
            run_group = wb.get("group") or cfg_key
            table = group.drop(columns=["config"]).assign(configuration=cfg_key, group=run_group)
            run = wandb.init(project=spec.project, entity=spec.get("entity"), job_type="summary", group=run_group,
                             name=f"summary-{run_group}", mode=mode, dir=str(config.hydra.sweep.dir), reinit=True,
                             tags=["summary", *[t for t in wb.get("tags", []) if not str(t).startswith("seed")]],
                             config={"configuration": cfg_key, "dataset": (first.get("dataset") or {}).get("name"),
                                     "model": (first.get("model") or {}).get("name"),
                                     "loss": (first.get("loss") or {}).get("name"),
                                     "seeds": sorted(int(x) for x in members["seed"].dropna()),
                                     "sweep_dir": str(config.hydra.sweep.dir)})
            run.log({"seed_summary": wandb.Table(dataframe=table)})
            run.summary.update(wandb_summary_fields(group))
            run.finish()
    except Exception as exc:  # the summary files are written already; W&B is a bonus
        log.warning("could not log the seed summary to W&B: %s", exc)
