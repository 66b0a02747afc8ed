"""Collaborative filtering: users rank items; the SL@K paper's protocol."""

from __future__ import annotations

from typing import Any

from bench.datasets.base import Interactions
from bench.datasets.noise import add_false_positives
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

    def datamodule(self, data: Any, seed: int, noise_ratio: float = 0.0, noise_seed: int = 0,
                   **kwargs: Any) -> RankingDataModule:
        """The data module; ``noise_ratio`` > 0 adds the paper's false-positive noise to the
        training split after the validation hold-out (bench.datasets.noise)."""
        if not isinstance(data, Interactions):
            raise ConfigError(f"task=cf needs user-item interactions, got a {type(data).__name__}; "
                              "use a recommendation data set (synthetic, health, ..., custom)")
        splits = add_false_positives(split_validation(data, self.valid_fraction, seed), noise_ratio, noise_seed)
        return RankingDataModule(splits, seed=seed, **kwargs)
