"""Top-K threshold estimators: beta_u^K, the score of user u's K-th ranked item.

Looked up by name in :data:`ESTIMATORS`; SL@K takes one with ``loss.estimator=<name>``.
See docs/thresholds.md for the terms (safe = never above the true K-th score) and each
estimator. Adding one: a module in this package with a
:class:`~bench.thresholds.base.ThresholdEstimator` subclass decorated
``@ESTIMATORS.register("name")``; it is then ``loss.estimator=name``.
"""

from collections.abc import Mapping
from typing import Any

from bench.errors import ConfigError
from bench.thresholds.base import ThresholdEstimator, kth_largest, mask_duplicates
from bench.thresholds.registry import ESTIMATORS

__all__ = ["ESTIMATORS", "ThresholdEstimator", "build", "from_spec", "kth_largest", "mask_duplicates"]


def build(name: str, **kwargs: Any) -> ThresholdEstimator:
    """Instantiate the estimator registered as ``name``."""
    return ESTIMATORS.build(name, **kwargs)


def from_spec(spec: str | Mapping[str, Any]) -> ThresholdEstimator:
    """An estimator from a config value: a name (``"cached"``) or ``{name: cached, **options}``."""
    options = {"name": spec} if isinstance(spec, str) else dict(spec)
    if "name" not in options:
        raise ConfigError(f"an estimator needs a name, e.g. {{name: cached, size: 128}}; got {options}; "
                          f"known: {', '.join(ESTIMATORS.names())}")
    return ESTIMATORS.build(options.pop("name"), **options)
