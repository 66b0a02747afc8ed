"""Losses, looked up by name in :data:`LOSSES`.

Adding a loss: a module in this package with a :class:`~bench.losses.base.RecLoss`
subclass decorated ``@LOSSES.register("name")``, plus ``conf/loss/name.yaml``. Modules
here are discovered automatically.
"""

from bench.registry import Registry

LOSSES: Registry = Registry("loss", package="bench.losses")

from bench.losses.base import LossBatch, RecLoss  # noqa: E402

__all__ = ["LOSSES", "LossBatch", "RecLoss", "build"]


def build(name: str, **kwargs) -> RecLoss:
    """Instantiate the loss registered as ``name`` (the Hydra ``_target_`` of conf/loss/*)."""
    return LOSSES.build(name, **kwargs)
