"""The estimator interface and the order-statistic helpers every estimator uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from bench.losses.base import TrainData
    from bench.models.base import EmbeddingModel


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


class ThresholdEstimator:
    """Base class.

    Attributes:
        safe: True when the estimate never exceeds the exact K-th score.
    """

    safe: bool = False

    def bind(self, data: "TrainData") -> None:
        """Called once with the training data (positives per user, sizes)."""

    @torch.no_grad()
    def estimate(self, model: "EmbeddingModel", users: Tensor, negatives: Tensor, k: int) -> Tensor:
        """(B,) estimates of each user's K-th largest score over the whole catalogue.

        Args:
            model: the current model.
            users: (B,) user ids (may repeat).
            negatives: (B, N) the batch's sampled negatives of each row.
            k: the rank K.
        """
        raise NotImplementedError
