"""Full-ranking evaluation: functional metrics and a chunked evaluator."""

from bench.evaluation.evaluator import FullRankingEvaluator, mean_metrics
from bench.evaluation.metrics import DEFAULT_KS, METRICS, metric_key, metrics_from_hits, rank_items, ranking_metrics

__all__ = ["DEFAULT_KS", "METRICS", "FullRankingEvaluator", "mean_metrics", "metric_key", "metrics_from_hits",
           "rank_items", "ranking_metrics"]
