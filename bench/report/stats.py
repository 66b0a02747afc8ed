"""The report's statistics: seed intervals, paired tests against a baseline, Holm (or BH, Bonferroni).

Two pairings, both two-sided (H0: no difference; the sign of the change gives the
direction):

* **across seeds**: the configuration's and the baseline's mean metric for each seed both
  ran, paired by seed (``scipy.stats.ttest_rel``);
* **across users**: each test user's metric averaged over the seeds both ran, paired by
  user id (``ttest_rel`` and ``wilcoxon``). Users are the larger sample, so this test
  sees smaller differences; it says nothing about seed-to-seed variation, which is why
  the seed test and the seed CI stay next to it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from bench.report.runs import PerUser, RunRecord

NAN = math.nan


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


@dataclass
class Comparison:
    """A configuration against the baseline on one metric (p-values before correction)."""

    rel_change: float
    seeds: tuple[int, ...]
    p_seed_t: float
    n_users: int
    mean_user_diff: float
    p_user_t: float
    p_user_wilcoxon: float


#: metric-name prefixes that read a run's other metric families instead of its per-user test means:
#: ``edge:mrr`` (link prediction's per-edge protocol), ``sampled:hit@10`` (the biased sampled protocol),
#: ``ref:ndcg@20`` (the SL@K reference code's test protocol, from run ledgers)
METRIC_FAMILIES = {"edge:": "per_edge", "sampled:": "sampled", "ref:": "ref"}
#: families that measure the paper's own metric under another protocol, so the paper's value stands beside them
PAPER_FAMILIES = ("ref:",)


def paper_metric(metric: str) -> str:
    """The paper value's name for ``metric``: ``ref:ndcg@20`` compares with the paper's ``ndcg@20``."""
    for prefix in PAPER_FAMILIES:
        if metric.startswith(prefix):
            return metric[len(prefix):]
    return metric


def metric_value(run: RunRecord, metric: str) -> float | None:
    """The run's value of ``metric`` (``ndcg@20``, or a :data:`METRIC_FAMILIES` name), None if absent."""
    for prefix, family in METRIC_FAMILIES.items():
        if metric.startswith(prefix):
            return getattr(run, family).get(metric[len(prefix):])
    return run.test.get(metric)


def seed_values(runs: list[RunRecord], metric: str) -> dict[int, float]:
    return {r.seed: v for r in runs if (v := metric_value(r, metric)) is not None}


def interval(runs: list[RunRecord], metric: str, confidence: float = 0.95) -> dict[str, float]:
    """n, mean, std and the Student-t CI of the metric over the runs' seeds."""
    return t_interval(seed_values(runs, metric).values(), confidence)


def paired_seed_test(a: dict[int, float], b: dict[int, float]) -> tuple[tuple[int, ...], float]:
    """Paired t-test of a vs b over the seeds both have: (seeds, two-sided p; NaN if < 2 seeds)."""
    seeds = tuple(sorted(set(a) & set(b)))
    if len(seeds) < 2:
        return seeds, NAN
    x, y = np.array([a[s] for s in seeds]), np.array([b[s] for s in seeds])
    if np.all(x == y):
        return seeds, 1.0
    return seeds, float(stats.ttest_rel(x, y).pvalue)


def seed_averaged_users(per_seed: list[PerUser], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(users, mean over seeds of each user's metric), over users present in every seed."""
    users = per_seed[0][0]
    for u, _ in per_seed[1:]:
        users = np.intersect1d(users, u)
    users = np.unique(users)
    acc = np.zeros(users.size)
    for u, vals in per_seed:
        order = np.argsort(u)
        acc += vals[metric][order][np.searchsorted(u[order], users)]
    return users, acc / len(per_seed)


def paired_user_tests(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Two-sided paired t-test and Wilcoxon signed-rank p-values of x vs y (aligned users)."""
    d = x - y
    if d.size < 2 or np.all(d == 0):
        return (1.0, 1.0) if d.size >= 2 else (NAN, NAN)
    p_t = float(stats.ttest_rel(x, y).pvalue)
    p_w = float(stats.wilcoxon(x, y).pvalue)
    return p_t, p_w


def compare(runs: list[RunRecord], base: list[RunRecord], metric: str) -> Comparison:
    """``runs`` (one configuration, several seeds) against the baseline's runs on ``metric``."""
    a, b = seed_values(runs, metric), seed_values(base, metric)
    mean_a, mean_b = np.mean(list(a.values())), np.mean(list(b.values()))
    rel = float((mean_a - mean_b) / mean_b) if mean_b else NAN
    seeds, p_seed = paired_seed_test(a, b)
    n_users, diff, p_t, p_w = 0, NAN, NAN, NAN
    if seeds:
        by_seed_a = {r.seed: r for r in runs}
        by_seed_b = {r.seed: r for r in base}
        loaded_a = [by_seed_a[s].load_per_user() for s in seeds]
        loaded_b = [by_seed_b[s].load_per_user() for s in seeds]
        pa = [p for p in loaded_a if p is not None and metric in p[1]]
        pb = [p for p in loaded_b if p is not None and metric in p[1]]
        if len(pa) == len(pb) == len(seeds):
            ua, xa = seed_averaged_users(pa, metric)
            ub, xb = seed_averaged_users(pb, metric)
            common, ia, ib = np.intersect1d(ua, ub, return_indices=True)
            x, y = xa[ia], xb[ib]
            n_users, diff = int(common.size), float(np.mean(x - y)) if common.size else NAN
            p_t, p_w = paired_user_tests(x, y)
    return Comparison(rel, seeds, p_seed, n_users, diff, p_t, p_w)


#: multiple-comparison corrections of a family of p-values (``bench.report --correction``)
CORRECTIONS = ("holm", "bh", "bonferroni", "none")


def adjust(pvalues: list[float], correction: str = "holm") -> list[float]:
    """Adjusted p-values of one family: ``holm`` (family-wise error, step-down), ``bonferroni``
    (family-wise, m·p), ``bh`` (Benjamini-Hochberg false discovery rate, for many losses at once;
    ``scipy.stats.false_discovery_control``) or ``none``. NaNs are left out of the family and stay NaN."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    if correction == "holm":
        return holm(pvalues)
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    out = [NAN] * len(pvalues)
    if not idx or correction == "none":
        return [float(p) for p in pvalues]
    raw = np.array([pvalues[i] for i in idx], dtype=float)
    if correction == "bonferroni":
        adj = np.minimum(1.0, raw * len(idx))
    else:
        adj = stats.false_discovery_control(raw, method="bh")
    for i, p in zip(idx, adj, strict=True):
        out[i] = float(p)
    return out


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (NaNs are left out of the family and stay NaN)."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    m = len(idx)
    out = [NAN] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda j: pvalues[j])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out
