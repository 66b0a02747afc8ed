"""Full-ranking top-K metrics with binary relevance, looked up by name in :data:`METRICS`
(definitions: docs/evaluation.md; they match trec_eval / ranx).

A metric is a function ``(stats: HitStats, k: int) -> (B,) float64`` registered with
``@METRICS.register("name")``; every registered metric is computed at every cut-off of
``eval.ks`` and reported as ``name@K``. Adding one is a module in this package (modules
here are discovered automatically).

Users with no held-out item have no defined value and must be excluded by the caller.
"""

from __future__ import annotations

from torch import Tensor

from bench.registry import Registry

#: metric name -> function (HitStats, k) -> (B,) float64 per-user values
METRICS: Registry = Registry("metric", package="bench.evaluation.metrics")

from bench.evaluation.metrics import standard  # noqa: E402,F401  (the built-ins register first)
from bench.evaluation.metrics.ranking import HitStats, ideal_dcg, rank_items, ranks_within  # noqa: E402

DEFAULT_KS = (5, 10, 20, 50, 100)

__all__ = ["DEFAULT_KS", "METRICS", "HitStats", "ideal_dcg", "metric_key", "metric_names", "metrics_from_hits",
           "rank_items", "ranking_metrics", "ranks_within"]


def metric_key(metric: str, k: int) -> str:
    """Canonical name, e.g. ``ndcg@20``."""
    return f"{metric}@{k}"


def metric_names() -> list[str]:
    """Registered metric names, built-ins first (recall, ndcg, precision, hit, mrr)."""
    return [name for name, _ in METRICS.items()]


def metrics_from_hits(hits: Tensor, n_relevant: Tensor, ks: tuple[int, ...] = DEFAULT_KS) -> dict[str, Tensor]:
    """Per-user metrics from the relevance of each user's ranked list.

    Args:
        hits: (B, L) bool/0-1, ``hits[b, r]`` = the item at rank r + 1 is relevant; L is
            the list length (>= max(ks), or the catalogue size if smaller).
        n_relevant: (B,) number of relevant items per user (>= 1).
        ks: cut-offs. A cut-off beyond L counts the whole list (Precision still divides by K).
    Returns:
        ``{"ndcg@20": (B,) float64 tensor, ...}`` for every registered metric and K in ks.
    """
    stats = HitStats.from_hits(hits, n_relevant)
    functions = METRICS.items()
    return {metric_key(name, k): fn(stats, k) for k in ks for name, fn in functions}


def ranking_metrics(scores: Tensor, relevant: Tensor, ks: tuple[int, ...] = DEFAULT_KS) -> dict[str, Tensor]:
    """Per-user metrics from a full score matrix (functional form).

    Args:
        scores: (B, I) scores, with excluded (e.g. training) items already set to -inf.
        relevant: (B, I) bool, the held-out items; every row needs one True.
        ks: cut-offs.
    Returns:
        dict of (B,) float64 tensors, see :func:`metrics_from_hits`.
    """
    top = rank_items(scores, max(ks))
    hits = relevant.gather(1, top)
    return metrics_from_hits(hits, relevant.sum(1), ks)
