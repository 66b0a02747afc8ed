"""The paper's false-positive noise: counts, never-seen items, untouched held-out splits, seeds."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from bench.datasets import CSR
from bench.datasets.noise import add_false_positives, false_positives
from bench.datasets.splits import RankingSplits
from bench.errors import ConfigError


def _splits(train: dict[int, list[int]], valid: dict[int, list[int]], test: dict[int, list[int]],
            n_items: int) -> RankingSplits:
    n_users = 1 + max([*train, *valid, *test])

    def csr(lists: dict[int, list[int]]) -> CSR:
        pairs = [[u, i] for u, items in lists.items() for i in items]
        return CSR.from_pairs(torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2), n_users, n_items)

    return RankingSplits("toy", n_users, n_items, csr(train), csr(valid), csr(test))


def _rows(csr: CSR) -> dict[int, list[int]]:
    return {u: csr.indices[csr.indptr[u]:csr.indptr[u + 1]].tolist() for u in range(csr.n_users)}


def test_each_user_gets_ceil_r_times_its_training_items_of_never_seen_items():
    splits = _splits({0: [0, 1, 2, 3, 4, 5, 6], 1: [7, 8], 2: [1]}, {0: [7], 1: [9]}, {0: [8, 9], 2: [2]}, 30)
    noisy = add_false_positives(splits, 0.15, seed=3)
    rows, before = _rows(noisy.train), _rows(splits.train)
    for u, n in ((0, math.ceil(7 * 0.15)), (1, math.ceil(2 * 0.15)), (2, 1)):  # 2, 1, 1 noisy items
        added = set(rows[u]) - set(before[u])
        assert len(added) == n and set(before[u]) <= set(rows[u]), u
        seen = set(before[u]) | set(_rows(splits.valid)[u]) | set(_rows(splits.test)[u])
        assert not added & seen, u
    assert noisy.valid is splits.valid and noisy.test is splits.test
    assert noisy.summary()["noise"] == {"ratio": 0.15, "seed": 3, "n_flipped": 4,
                                        "per_user": "ceil(0.15 * training items)"}
    assert add_false_positives(splits, 0.0) is splits and "noise" not in splits.summary()


def test_the_draw_is_seeded_and_uniform_over_the_never_seen_items():
    # user 0 has seen items 0-3 of 8, and gets ceil(0.5 * 2) = 1 of items 4-7
    splits = _splits({0: [0, 1]}, {0: [2]}, {0: [3]}, 8)
    assert false_positives(splits, 0.5, 7).to_pairs().tolist() == false_positives(splits, 0.5, 7).to_pairs().tolist()
    counts = Counter(false_positives(splits, 0.5, seed).indices.item() for seed in range(600))
    assert set(counts) == {4, 5, 6, 7}
    # each of the 4 items has probability 1/4: 600 draws put each within 5 standard deviations of 150
    assert all(abs(c - 150) < 5 * math.sqrt(600 * 0.25 * 0.75) for c in counts.values()), counts


def test_too_few_never_seen_items_or_a_bad_ratio_fail_in_one_line():
    splits = _splits({0: [0, 1, 2, 3]}, {0: [4]}, {0: [5]}, 6)
    with pytest.raises(ConfigError, match="asks 1 noisy items of user 0, who has only 0 items outside"):
        false_positives(splits, 0.2)
    for ratio in (-0.1, 1.0, "x"):
        with pytest.raises(ConfigError, match="dataset.noise_ratio=.* is out of range: use a share in"):
            false_positives(splits, ratio)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dataset.noise_seed=-1 is out of range"):
        false_positives(splits, 0.1, -1)
