"""The threshold-estimator registry, apart from the package so that the modules that register
estimators into it import it without importing the package (whose ``__init__`` imports them)."""

from bench.registry import Registry

ESTIMATORS: Registry = Registry("threshold estimator", package="bench.thresholds")

#: the estimators ``python -m bench.thresholds`` compares unless told which
DEFAULT_ESTIMATORS = ("sampled", "cached", "stratified", "binomial_safe", "quantile")
