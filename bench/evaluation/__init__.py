"""Full-ranking evaluation: registered metrics (functional form), a chunked evaluator, the
per-edge (filtered) ranking of link prediction and, apart from them, the biased sampled-negatives
protocol of older papers."""

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
from bench.evaluation.sampled import SAMPLED_PREFIX, draw_negatives, sampled_summary

__all__ = ["DEFAULT_KS", "EDGE_PREFIX", "METRICS", "SAMPLED_PREFIX", "FullRankingEvaluator", "draw_negatives",
           "edge_metrics", "edge_summary", "filtered_ranks", "mean_metrics", "metric_key", "metric_names",
           "metrics_from_hits", "rank_items", "ranking_metrics", "sampled_summary"]
