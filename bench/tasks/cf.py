"""Collaborative filtering: users rank items; the SL@K paper's protocol."""

from __future__ import annotations

from typing import Any

from bench.datasets.base import Interactions
from bench.datasets.splits import split_validation
from bench.errors import ConfigError
from bench.tasks.datamodule import RankingDataModule


class CFTask:
    """Training pairs (u, i) with sampled negatives; a random share of each user's training
    items validates (docs/evaluation.md#splits).

    Args:
        valid_fraction: share of each user's training items held out for validation
            (``max(1, floor(.))``, seeded by the run seed).
    """

    name = "cf"

    def __init__(self, valid_fraction: float = 0.1, name: str = "cf") -> None:
        self.valid_fraction = float(valid_fraction)

    def datamodule(self, data: Any, seed: int, **kwargs: Any) -> RankingDataModule:
        if not isinstance(data, Interactions):
            raise ConfigError(f"task=cf needs user-item interactions, got a {type(data).__name__}; "
                              "use a recommendation data set (synthetic, health, ..., custom)")
        return RankingDataModule(split_validation(data, self.valid_fraction, seed), seed=seed, **kwargs)
