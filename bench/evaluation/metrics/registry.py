"""The metric registry, apart from the package so that the metric modules that register into it
(:mod:`~bench.evaluation.metrics.standard`, a user's) import it without importing the package."""

from bench.registry import Registry

#: metric name -> function (HitStats, k) -> (B,) float64 per-user values
METRICS: Registry = Registry("metric", package="bench.evaluation.metrics")
