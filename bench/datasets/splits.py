"""Train / validation / test splits for ranking, and the paper's validation hold-out."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.datasets.base import CSR, Interactions, random_holdout
from bench.errors import ConfigError


@dataclass
class RankingSplits:
    """Train / validation / test item lists per query (a user, or a node in link
    prediction): what every task hands to the data module."""

    name: str
    n_users: int
    n_items: int
    train: CSR
    valid: CSR
    test: CSR
    #: the false-positive noise added to ``train`` (bench.datasets.noise), None when none
    noise: dict | None = None

    def summary(self) -> dict:
        out = {
            "dataset": self.name,
            "n_users": self.n_users,
            "n_items": self.n_items,
            "n_train": self.train.nnz,
            "n_valid": self.valid.nnz,
            "n_test": self.test.nnz,
        }
        return {**out, "noise": self.noise} if self.noise else out


def split_validation(
    data: Interactions, fraction: float = 0.1, seed: int = 0
) -> RankingSplits:
    """Hold out a random ``fraction`` of each user's training items for validation.

    The SL@K paper's protocol: ``max(1, floor(fraction * n_u))`` items per user, drawn
    uniformly without replacement, seeded by the run's seed. A user with a single
    training item keeps it for training (holding it out would leave the user with no
    training signal); 10-core data never has such users.

    Args:
        data: the data set; its ``train`` pairs are split.
        fraction: share of each user's training items to hold out, in [0, 1).
        seed: seed of the split (the run's seed).
    Returns:
        RankingSplits with disjoint train and valid, and data.test as test.
    """
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"task.valid_fraction must be in [0, 1), got {fraction}")
    train = CSR.from_pairs(data.train, data.n_users, data.n_items)
    test = CSR.from_pairs(data.test, data.n_users, data.n_items)
    deg = train.degrees()
    n_valid = torch.clamp(torch.floor(deg.double() * fraction).long(), min=1)
    if fraction == 0.0:
        n_valid = torch.zeros_like(deg)
    n_valid = torch.where(deg >= 2, n_valid, torch.zeros_like(deg))
    is_valid = random_holdout(train.row_ids(), n_valid, torch.Generator().manual_seed(int(seed)))
    pairs = train.to_pairs()
    return RankingSplits(
        name=data.name,
        n_users=data.n_users,
        n_items=data.n_items,
        train=CSR.from_pairs(pairs[~is_valid], data.n_users, data.n_items),
        valid=CSR.from_pairs(pairs[is_valid], data.n_users, data.n_items),
        test=test,
    )
