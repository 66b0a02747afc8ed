"""Losses, looked up by name in :data:`LOSSES`.

Adding a loss: a module in this package with a :class:`~bench.losses.base.RecLoss`
subclass decorated ``@LOSSES.register("name")``, plus ``conf/loss/name.yaml``. Modules
here are discovered automatically. Formulas and switches: docs/losses.md.
"""

from typing import Any

from bench.losses.base import RecLoss
from bench.losses.registry import LOSSES

__all__ = ["LOSSES", "RecLoss", "build"]


def build(name: str, recipe: dict | None = None, **kwargs: Any) -> RecLoss:
    """Instantiate the loss registered as ``name`` (the Hydra ``_target_`` of conf/loss/*).

    ``recipe`` holds the loss's recommended settings for other parts of the pipeline
    (score function, learning rate, weight decay); the config reads it, the loss does not.
    """
    return LOSSES.build(name, **kwargs)
