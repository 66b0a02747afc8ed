"""Full-ranking evaluation: registered metrics (functional form), a chunked evaluator and the
per-edge (filtered) ranking of link prediction."""

from bench.evaluation.evaluator import FullRankingEvaluator, mean_metrics
from bench.evaluation.metrics import (
                                      DEFAULT_KS,
                                      METRICS,
                                      metric_key,
                                      metric_names,
                                      metrics_from_hits,
                                      rank_items,
                                      ranking_metrics,
)
from bench.evaluation.per_edge import EDGE_PREFIX, edge_metrics, edge_summary, filtered_ranks

__all__ = ["DEFAULT_KS", "EDGE_PREFIX", "METRICS", "FullRankingEvaluator", "edge_metrics", "edge_summary",
           "filtered_ranks", "mean_metrics", "metric_key", "metric_names", "metrics_from_hits", "rank_items",
           "ranking_metrics"]
