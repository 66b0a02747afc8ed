"""Report tables: one per (task, dataset, model), rows = losses, cells = seed statistics.

:func:`build` returns a long DataFrame (one row per configuration and metric) holding
every number the renderers print, so the CSV is the table and the table is the CSV.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from bench.losses.families import family_of, order_key
from bench.report import stats
from bench.report.runs import RunRecord

SIG_MARKS = {"seed": "*", "user": "†"}
#: backbones in the order of the paper's Table 2 columns; others follow alphabetically
BACKBONE_ORDER = ("mf", "lightgcn", "xsimgcl")


def _table_key(table: tuple[str, str, str]) -> tuple:
    task, dataset, model = table
    rank = BACKBONE_ORDER.index(model) if model in BACKBONE_ORDER else len(BACKBONE_ORDER)
    return task, dataset, rank, model


def _group(records: Iterable[RunRecord]) -> dict[tuple, dict[str, list[RunRecord]]]:
    tables: dict[tuple, dict[str, list[RunRecord]]] = {}
    for r in records:
        tables.setdefault(r.table, {}).setdefault(r.label, []).append(r)
    return tables


def find_baseline(rows: dict[str, list[RunRecord]], baseline: str | None) -> tuple[str | None, str | None]:
    """(row label of the baseline in this table or None, a note when it is missing or ambiguous)."""
    if not baseline:
        return None, None
    if baseline in rows:
        return baseline, None
    by_loss = [label for label, runs in rows.items() if runs[0].loss == baseline]
    if len(by_loss) == 1:
        return by_loss[0], None
    if by_loss:
        return None, f"baseline {baseline!r} is ambiguous here ({', '.join(sorted(by_loss))}); pass one of them"
    return None, f"baseline {baseline!r} has no runs here (rows: {', '.join(sorted(rows))})"


def build(records: list[RunRecord], metrics: list[str], baseline: str | None = None, confidence: float = 0.95,
          alpha: float = 0.05, correction: str = "holm") -> tuple[pd.DataFrame, list[str]]:
    """The report's numbers.

    Args:
        records: completed runs (labels assigned, see :func:`bench.report.runs.assign_labels`).
        metrics: test metrics to report, e.g. ``["recall@20", "ndcg@20"]``.
        baseline: a row label or loss name to compare every other row with.
        confidence: of the seed intervals.
        alpha: significance level of the marks.
        correction: over the non-baseline rows of a table, per metric and test: "holm", "bh"
            (Benjamini-Hochberg), "bonferroni" or "none" (:func:`bench.report.stats.adjust`).
    Returns:
        (long table, notes). Columns: task, dataset, model, row, loss, name (the paper's: SL@20, with
        the row's variant), family (:mod:`bench.losses.families`), metric, n, seeds, mean,
        std, ci_half, ci_low, ci_high, best, paper, paper_gap, baseline, rel_change, paired_seeds,
        p_seed_t, n_users, mean_user_diff, p_user_t, p_user_wilcoxon, the three ``*_adj`` and
        sig_seed / sig_user (booleans at ``alpha`` on the adjusted p-values).
    """
    if correction not in stats.CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(stats.CORRECTIONS)}, got {correction!r}")
    out, notes = [], []
    for (task, dataset, model), rows in sorted(_group(records).items(), key=lambda item: _table_key(item[0])):
        base_label, note = find_baseline(rows, baseline)
        if note:
            notes.append(f"{dataset} / {model}: {note}")
        # the paper's families in Table 2's order (pairwise ... top-K), configurations of a loss by label
        order = sorted(rows, key=lambda label: (order_key(rows[label][0].loss), label))
        for metric in metrics:
            block = []
            for label in order:
                runs = rows[label]
                ci = stats.interval(runs, metric, confidence)
                if ci["n"] == 0:
                    continue
                paper = runs[0].paper.get(stats.paper_metric(metric))
                row = {"task": task, "dataset": dataset, "model": model, "row": label, "loss": runs[0].loss,
                       "name": runs[0].name, "family": family_of(runs[0].loss),
                       "metric": metric, **ci,
                       "seeds": ",".join(str(s) for s in sorted(stats.seed_values(runs, metric))),
                       "paper": paper if paper is not None else math.nan,
                       "paper_gap": (ci["mean"] - paper) / paper if paper else math.nan,
                       "baseline": base_label or ""}
                if base_label is not None and label != base_label:
                    c = stats.compare(runs, rows[base_label], metric)
                    row.update(rel_change=c.rel_change, paired_seeds=",".join(map(str, c.seeds)), p_seed_t=c.p_seed_t,
                               n_users=c.n_users, mean_user_diff=c.mean_user_diff, p_user_t=c.p_user_t,
                               p_user_wilcoxon=c.p_user_wilcoxon)
                block.append(row)
            if not block:
                continue
            best = max(r["mean"] for r in block)
            for r in block:
                r["best"] = r["mean"] == best
            for test in ("p_seed_t", "p_user_t", "p_user_wilcoxon"):
                idx = [i for i, r in enumerate(block) if test in r]
                raw = [block[i][test] for i in idx]
                adj = stats.adjust(raw, correction)
                for i, p in zip(idx, adj):
                    block[i][f"{test}_adj"] = p
            for r in block:
                if "p_seed_t" in r:
                    r["sig_seed"] = bool(r["p_seed_t_adj"] < alpha)
                    r["sig_user"] = bool(r["p_user_t_adj"] < alpha and r["p_user_wilcoxon_adj"] < alpha)
            out.extend(block)
    columns = ["task", "dataset", "model", "row", "loss", "name", "family", "metric", "n", "seeds", "mean", "std",
               "ci_half", "ci_low", "ci_high", "best", "paper", "paper_gap", "baseline", "rel_change", "paired_seeds",
               "p_seed_t", "n_users", "mean_user_diff", "p_user_t", "p_user_wilcoxon", "p_seed_t_adj", "p_user_t_adj",
               "p_user_wilcoxon_adj", "sig_seed", "sig_user"]
    return pd.DataFrame(out, columns=columns), notes
