"""False-positive noise on the training split: the SL@K paper's noise scenario (its Figure 3).

For a noise ratio r, every user gets ceil(r * |P_u|) items it never interacted with (in any
split) as extra training positives, where P_u is the user's training items. Validation and
test are untouched, so the metrics still measure the true held-out items; the noisy items are
masked at evaluation like every training item.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from bench.datasets.base import CSR
from bench.datasets.splits import RankingSplits
from bench.errors import ConfigError

#: the dataset config keys of the noise scenario: settings of the data that no loader takes
NOISE_KEYS = ("noise_ratio", "noise_seed")


def load_dataset(spec: Any) -> Any:
    """The data of a ``dataset`` config (its ``load()``), without the noise keys, which the task
    applies to its training split (``task.datamodule(..., noise_ratio=, noise_seed=)``).

    Args:
        spec: the ``dataset`` config (a DictConfig or a dict with ``_target_``).
    """
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(spec, resolve=True) if OmegaConf.is_config(spec) else spec
    if not isinstance(plain, dict):
        raise TypeError(f"a dataset config is a mapping with _target_, got {type(plain).__name__}")
    # recipe: the data set's suggested schedule, read by the trainer config, not the loader's
    return instantiate({k: v for k, v in plain.items() if k not in (*NOISE_KEYS, "recipe")}).load()


def check_noise(ratio: float, seed: int) -> None:
    """One-line errors for a noise ratio outside [0, 1) or a seed that is no integer >= 0."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= ratio < 1.0:
        raise ConfigError(f"dataset.noise_ratio={ratio} is out of range: use a share in [0, 1), e.g. 0.1 for 10%")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"dataset.noise_seed={seed} is out of range: use an integer >= 0")


def false_positives(splits: RankingSplits, ratio: float, seed: int = 0) -> CSR:
    """ceil(ratio * |train items of u|) items per user u, drawn uniformly without replacement
    from the items u has in no split.

    Args:
        splits: the train / valid / test lists.
        ratio: r in [0, 1).
        seed: the draw's seed (the same noise for every run seed of a configuration).
    Returns:
        (n_users x n_items) CSR of the flipped items.
    Raises:
        ConfigError: a user has fewer non-interacted items than it needs.
    """
    check_noise(ratio, seed)
    n_users, n_items = splits.n_users, splits.n_items
    need = np.ceil(splits.train.degrees().numpy().astype(np.float64) * ratio - 1e-9).astype(np.int64)
    need = np.maximum(need, 0)
    positives = [np.concatenate([csr.indices[csr.indptr[u]:csr.indptr[u + 1]].numpy()
                                 for csr in (splits.train, splits.valid, splits.test)]) for u in range(n_users)]
    rng = np.random.default_rng(seed)
    users, items = [], []
    for u in np.nonzero(need)[0]:
        free = n_items - np.unique(positives[u]).size
        if free < need[u]:
            raise ConfigError(f"dataset.noise_ratio={ratio} asks {need[u]} noisy items of user {u}, who has only "
                              f"{free} items outside its interactions; lower dataset.noise_ratio")
        # rejection: draw in random order, drop interacted items and repeats, keep the first need[u]
        chosen: list[int] = []
        taken = set(positives[u].tolist())
        while len(chosen) < need[u]:
            for item in rng.integers(0, n_items, size=2 * (need[u] - len(chosen)) + 8).tolist():
                if item not in taken:
                    taken.add(item)
                    chosen.append(item)
                    if len(chosen) == need[u]:
                        break
        users.append(np.full(len(chosen), u))
        items.append(np.asarray(chosen))
    pairs = (torch.from_numpy(np.stack([np.concatenate(users), np.concatenate(items)], 1)) if users
             else torch.zeros(0, 2, dtype=torch.int64))
    return CSR.from_pairs(pairs, n_users, n_items)


def add_false_positives(splits: RankingSplits, ratio: float, seed: int = 0) -> RankingSplits:
    """``splits`` with :func:`false_positives` added to the training lists (validation and
    test unchanged); the summary records the ratio, the seed and the number flipped."""
    if ratio == 0:
        return splits
    noise = false_positives(splits, ratio, seed)
    train = CSR.from_pairs(torch.cat([splits.train.to_pairs(), noise.to_pairs()]), splits.n_users, splits.n_items)
    return replace(splits, train=train, noise={"ratio": float(ratio), "seed": int(seed), "n_flipped": noise.nnz,
                                               "per_user": f"ceil({ratio} * training items)"})
