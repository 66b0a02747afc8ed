"""Full-ranking evaluation: registered metrics (functional form) and a chunked evaluator."""

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

__all__ = ["DEFAULT_KS", "METRICS", "FullRankingEvaluator", "mean_metrics", "metric_key", "metric_names",
           "metrics_from_hits", "rank_items", "ranking_metrics"]
