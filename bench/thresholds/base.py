"""The estimator interface and the order-statistic helpers every estimator uses
(terms: docs/thresholds.md)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from bench.contracts import LossBatch, Scorer, SyncedRows, TrainData, draws_per_row
from bench.datasets.base import CSR
from bench.errors import ConfigError

POSITIVES = ("p90", "all")


def kth_largest(scores: Tensor, k: int) -> Tensor:
    """K-th largest entry per row; -inf where a row has fewer than k finite entries.

    Args:
        scores: (B, M) scores, absent entries as -inf.
        k: rank (1-based).
    Returns:
        (B,) values. -inf is the only safe answer when fewer than k items were scored:
        the smallest of m < k scored items can exceed the true k-th score.
    """
    if k > scores.shape[1]:
        return torch.full((scores.shape[0],), float("-inf"), dtype=scores.dtype, device=scores.device)
    return torch.topk(scores, k, dim=1).values[:, -1]


def mask_duplicates(items: Tensor, scores: Tensor) -> Tensor:
    """Scores with every repeat of an item in its row set to -inf (first kept).

    Sampling with replacement can list one high-scoring negative twice; counting it twice
    lifts the sample's K-th largest above the catalogue's. De-duplicated, any subset's
    K-th largest is a safe (never too high) estimate.

    Args:
        items: (B, M) item ids; scores: (B, M) their scores.
    Returns:
        (B, M) scores, a copy.
    """
    sorted_items, order = torch.sort(items, dim=1, stable=True)
    repeat = torch.zeros_like(items, dtype=torch.bool)
    repeat[:, 1:] = sorted_items[:, 1:] == sorted_items[:, :-1]
    out = scores.clone()
    out.scatter_(1, order, torch.where(repeat, torch.full_like(scores, float("-inf")), scores.gather(1, order)))
    return out


def union_kth(scorer: Scorer, users: Tensor, blocks: list[tuple[Tensor, Tensor | None]], k: int) -> Tensor:
    """K-th largest exact score over the union of item sets, each item counted once.

    Any set of distinct items scored exactly gives a safe estimate (its K-th largest is at
    most the catalogue's), so merging candidate sources and de-duplicating is always safe.

    Args:
        scorer: the model (``score_items``).
        users: (B,) user ids.
        blocks: (items (B, M_b), valid (B, M_b) bool or None = all valid) per source.
        k: the rank K.
    Returns:
        (B,) values; -inf where fewer than k distinct items were given.
    """
    ids, keep = [], []
    offset = 0
    for items, valid in blocks:
        valid = torch.ones_like(items, dtype=torch.bool) if valid is None else valid
        # invalid slots get distinct negative ids so they never collide with a real item
        pad = -1 - offset - torch.arange(items.shape[1], device=items.device).expand_as(items)
        ids.append(torch.where(valid, items, pad))
        keep.append(valid)
        offset += items.shape[1]
    ids_all, keep_all = torch.cat(ids, 1), torch.cat(keep, 1)
    scores = scorer.score_items(users, ids_all.clamp(min=0)).masked_fill(~keep_all, float("-inf"))
    return kth_largest(mask_duplicates(ids_all, scores), k)


class ThresholdEstimator(nn.Module):
    """Base class. A module, so that an estimator's state (buffers) is saved and restored
    with the loss that owns it.

    Attributes:
        safe: True when the estimate never exceeds the exact K-th score.
    """

    safe: bool = False

    def bind(self, data: TrainData) -> None:
        """Called once with the training data (positives per user, sizes)."""

    def on_train_epoch_start(self, epoch: int) -> None:
        """Called at the start of every training epoch by the loss that owns the estimator."""

    def synced_rows(self, batch: LossBatch) -> SyncedRows:
        """(buffer, rows) of per-user state written while estimating for ``batch`` (see
        :meth:`bench.losses.base.RecLoss.synced_rows`); none by default."""
        return []

    @torch.no_grad()
    def estimate(self, scorer: Scorer, users: Tensor, negatives: Tensor, k: int) -> Tensor:
        """(B,) estimates of each user's K-th largest score over the whole catalogue.

        Args:
            scorer: the current model.
            users: (B,) user ids (may repeat).
            negatives: (B, N) the batch's sampled negatives of each row.
            k: the rank K.
        """
        raise NotImplementedError

    @torch.no_grad()
    def estimate_shared(self, scorer: Scorer, users: Tensor, draws: Tensor, k: int) -> Tensor:
        """:meth:`estimate` when the negatives are shared draws: ``draws`` (G, N), one per
        group of consecutive rows (:func:`bench.contracts.draws_per_row`). By default the
        draws are expanded to per-row negatives; an estimator may score each draw once."""
        return self.estimate(scorer, users, draws_per_row(draws, users.numel()), k)

    def estimate_batch(self, batch: LossBatch, k: int) -> Tensor:
        """(B,) estimates for a training batch's rows, from its negatives or shared draws."""
        scorer, users = batch.require("scorer"), batch.require("users")
        if batch.draws is not None:
            return self.estimate_shared(scorer, users, batch.draws.view(-1, batch.draws.shape[-1]), k)
        return self.estimate(scorer, users, batch.require("negatives"), k)


def positive_cap(train: CSR, positives: str) -> int | None:
    """Positives kept per user: ``"p90"`` caps at the 90th percentile of users' positive
    counts (the SL@K reference code's padding cap, lowest item ids first); ``"all"``: no cap."""
    if positives not in POSITIVES:
        raise ConfigError(f"unknown estimator positives '{positives}'; use {' or '.join(POSITIVES)}")
    return max(1, int(np.percentile(train.degrees().numpy(), 90))) if positives == "p90" else None


class SampleEstimator(ThresholdEstimator):
    """Base of estimators built from each user's training positives (and the batch's
    negatives): keeps the training data given by :meth:`bind`.

    Args:
        positives: "all" (every training positive) or "p90" (see :func:`positive_cap`).
    """

    def __init__(self, positives: str = "all") -> None:
        super().__init__()
        if positives not in POSITIVES:
            raise ConfigError(f"unknown estimator positives '{positives}'; use {' or '.join(POSITIVES)}")
        self.positives = positives
        self.train_csr: CSR | None = None
        self.n_items = 0
        self.cap: int | None = None

    def bind(self, data: TrainData) -> None:
        self.train_csr, self.n_items = data.train, data.n_items
        self.cap = positive_cap(data.train, self.positives)

    def positive_items(self, users: Tensor) -> tuple[Tensor, Tensor]:
        """(items (B, L), valid (B, L)) of each user's training positives (at most ``cap``)."""
        if self.train_csr is None:
            raise RuntimeError("bind() the estimator to the training data first")
        return self.train_csr.on(users.device).padded_rows(users, self.cap)
