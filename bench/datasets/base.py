"""Interaction data containers shared by every data source.

Ids are 0-based and contiguous: users in ``[0, n_users)``, items in ``[0, n_items)``.
Pairs are int64 tensors of shape (E, 2) holding (user, item), unique and sorted by
user then item, so that the same data always gives the same seeded splits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from torch import Tensor

log = logging.getLogger(__name__)


def canonical_pairs(pairs: Tensor) -> Tensor:
    """Sorted, de-duplicated (user, item) pairs.

    Args:
        pairs: (E, 2) integer tensor.
    Returns:
        (E', 2) int64 tensor, unique rows sorted by user then item.
    """
    pairs = pairs.to(torch.int64).reshape(-1, 2)
    if pairs.numel() == 0:
        return pairs
    return torch.unique(pairs, dim=0)  # unique sorts rows lexicographically


@dataclass
class CSR:
    """Per-user item lists in compressed sparse row form.

    ``indices[indptr[u]:indptr[u + 1]]`` are user u's items, sorted ascending.
    """

    indptr: Tensor  # (n_users + 1,) int64
    indices: Tensor  # (nnz,) int64
    n_items: int
    _copies: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_pairs(cls, pairs: Tensor, n_users: int, n_items: int) -> CSR:
        """Build from (E, 2) (user, item) pairs (any order, no duplicates)."""
        pairs = pairs.to(torch.int64)
        order = torch.argsort(pairs[:, 0] * n_items + pairs[:, 1])
        pairs = pairs[order]
        counts = torch.bincount(pairs[:, 0], minlength=n_users)
        indptr = torch.zeros(n_users + 1, dtype=torch.int64)
        indptr[1:] = torch.cumsum(counts, 0)
        return cls(indptr=indptr, indices=pairs[:, 1].contiguous(), n_items=n_items)

    @property
    def n_users(self) -> int:
        return self.indptr.numel() - 1

    @property
    def nnz(self) -> int:
        return self.indices.numel()

    def degrees(self) -> Tensor:
        """(n_users,) number of items per user."""
        return self.indptr[1:] - self.indptr[:-1]

    def row_ids(self) -> Tensor:
        """(nnz,) the user of each stored item."""
        return torch.repeat_interleave(torch.arange(self.n_users, device=self.indptr.device), self.degrees())

    def to_pairs(self) -> Tensor:
        """(nnz, 2) (user, item) pairs, sorted."""
        return torch.stack([self.row_ids(), self.indices], dim=1)

    def gather_rows(self, users: Tensor) -> tuple[Tensor, Tensor]:
        """Items of several users at once, without a Python loop.

        Args:
            users: (B,) user ids.
        Returns:
            (rows, items): two (M,) tensors; ``rows`` indexes into ``users`` (0..B-1).
        """
        starts = self.indptr[users]
        counts = self.indptr[users + 1] - starts
        rows = torch.repeat_interleave(torch.arange(users.numel(), device=users.device), counts)
        # position of each entry inside its row: global index minus the row's first index
        offsets = torch.cumsum(counts, 0) - counts
        within = torch.arange(rows.numel(), device=users.device) - offsets[rows]
        return rows, self.indices[starts[rows] + within]

    def padded_rows(self, users: Tensor, max_len: int | None = None) -> tuple[Tensor, Tensor]:
        """Each user's items as a padded matrix.

        Args:
            users: (B,) user ids.
            max_len: keep at most this many items per user (the lowest ids); None = all.
        Returns:
            (items (B, L), valid (B, L) bool); padding holds item 0 and valid False.
        """
        rows, items = self.gather_rows(users)
        counts = self.indptr[users + 1] - self.indptr[users]
        within = torch.arange(rows.numel(), device=users.device) - (torch.cumsum(counts, 0) - counts)[rows]
        width = int(counts.max()) if counts.numel() else 0
        if max_len is not None:
            width = min(width, int(max_len))
        keep = within < width
        out = torch.zeros(users.numel(), width, dtype=torch.int64, device=users.device)
        valid = torch.zeros(users.numel(), width, dtype=torch.bool, device=users.device)
        out[rows[keep], within[keep]] = items[keep]
        valid[rows[keep], within[keep]] = True
        return out, valid

    def dense_rows(self, users: Tensor) -> Tensor:
        """(B, n_items) bool matrix, True where the user has the item."""
        out = torch.zeros(users.numel(), self.n_items, dtype=torch.bool, device=users.device)
        rows, items = self.gather_rows(users)
        out[rows, items] = True
        return out

    def contains(self, users: Tensor, items: Tensor) -> Tensor:
        """Whether each (user, item) pair is stored: ``users``, ``items`` of one shape, a bool tensor
        of that shape. A binary search per pair in the sorted keys ``user * n_items + item`` (one
        int64 array of nnz entries, built once per device): cheaper than :meth:`dense_rows` when
        the pairs are few next to ``B * n_items``."""
        key = f"keys:{self.indptr.device}"
        keys = self._copies.get(key)
        if keys is None:  # CSR order is key order: rows by user, items ascending within a row
            keys = self._copies[key] = self.row_ids() * self.n_items + self.indices
        wanted = users * self.n_items + items
        at = torch.searchsorted(keys, wanted).clamp_(max=max(keys.numel() - 1, 0))
        return keys[at] == wanted if keys.numel() else torch.zeros_like(wanted, dtype=torch.bool)

    def to(self, device: torch.device | str) -> CSR:
        return CSR(self.indptr.to(device), self.indices.to(device), self.n_items)

    def on(self, device: torch.device | str) -> CSR:
        """This CSR on ``device``, copied once per device and then reused (training and
        evaluation ask for it every step)."""
        device = torch.device(device)
        if self.indptr.device == device:
            return self
        key = str(device)
        if key not in self._copies:
            self._copies[key] = self.to(device)
        return self._copies[key]


@dataclass
class Interactions:
    """A data set as shipped: train and test interactions.

    Attributes:
        name: data set name (for logs and results).
        n_users, n_items: catalogue sizes.
        train, test: (E, 2) int64 canonical (user, item) pairs.
        timestamps: optional per-pair times aligned with ``train``/``test`` (seconds).
        info: free-form provenance (source file, checksum, filtering applied).
    """

    name: str
    n_users: int
    n_items: int
    train: Tensor
    test: Tensor
    train_timestamps: Tensor | None = None
    test_timestamps: Tensor | None = None
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            pairs = getattr(self, split)
            if pairs.numel() and (pairs.min() < 0 or pairs[:, 0].max() >= self.n_users
                                  or pairs[:, 1].max() >= self.n_items):
                raise ValueError(f"{self.name}: {split} ids out of range")


def random_holdout(users: Tensor, n_holdout: Tensor, gen: torch.Generator) -> Tensor:
    """Pick ``n_holdout[u]`` of each user's entries uniformly at random, without replacement.

    Args:
        users: (E,) user of each entry, sorted (grouped by user).
        n_holdout: (n_users,) how many entries of each user to pick (<= the user's count).
        gen: random generator.
    Returns:
        (E,) bool, True for the picked entries.
    """
    n = users.numel()
    counts = torch.bincount(users, minlength=n_holdout.numel())
    starts = torch.cumsum(counts, 0) - counts
    # a random order within each user: sort by a random key, then stably by user
    order = torch.argsort(torch.rand(n, generator=gen))
    order = order[torch.argsort(users[order], stable=True)]
    rank = torch.empty_like(order)
    rank[order] = torch.arange(n) - starts[users[order]]
    return rank < n_holdout[users]


def per_user_split(pairs: Tensor, n_users: int, test_fraction: float, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Split canonical (user, item) pairs per user into train and test.

    Each user with n >= 2 items gets ``max(1, round(test_fraction * n))`` test items
    (never all of them); users with one item keep it in train.

    Returns:
        (train, test) pairs.
    """
    deg = torch.bincount(pairs[:, 0], minlength=n_users)
    n_test = torch.clamp(torch.round(deg.double() * test_fraction).long(), min=1)
    n_test = torch.minimum(n_test, deg - 1).clamp(min=0)
    is_test = random_holdout(pairs[:, 0], n_test, gen)
    return pairs[~is_test], pairs[is_test]
