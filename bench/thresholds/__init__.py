"""Top-K threshold estimators: beta_u^K, the score of user u's K-th ranked item.

Looked up by name in :data:`ESTIMATORS`; SL@K takes one with ``loss.estimator=<name>``.
See THRESHOLDS.md for the terms (safe = never above the true K-th score).
"""

from bench.registry import Registry

ESTIMATORS: Registry = Registry("threshold estimator", package="bench.thresholds")

from bench.thresholds.base import ThresholdEstimator, kth_largest, mask_duplicates  # noqa: E402

__all__ = ["ESTIMATORS", "ThresholdEstimator", "build", "kth_largest", "mask_duplicates"]


def build(name: str, **kwargs) -> ThresholdEstimator:
    """Instantiate the estimator registered as ``name``."""
    return ESTIMATORS.build(name, **kwargs)
