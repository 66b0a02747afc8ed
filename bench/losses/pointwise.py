"""BCE: pointwise binary cross-entropy (SASRec's loss; the usual link-prediction baseline)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses.base import RecLoss, row_mean
from bench.losses.registry import LOSSES

REDUCTIONS = ("mean", "sum")


def bce_terms(pos: Tensor, neg: Tensor, reduction: str = "mean", valid: Tensor | None = None) -> Tensor:
    r"""(B,) per-pair binary cross-entropy with logits (see :func:`bce_loss`).

    Args:
        pos: (B,) positive scores (logits); neg: (B, N) negative scores (logits).
        reduction: how a pair's negative terms combine: "mean" or "sum" over its valid negatives.
        valid: (B, N) bool, the true negatives of shared draws (the others hold -inf); None = all.
    Returns:
        (B,) terms in nats; a row without valid negatives keeps its positive term only.
    """
    # softplus(x) = -log(1 - sigma(x)) = log(1 + e^x), stable for any finite x; at -inf it is 0
    # with zero gradient, and torch.where keeps masked columns out of the backward pass entirely
    per_neg = F.softplus(neg)
    if reduction == "mean":
        return F.softplus(-pos) + row_mean(per_neg, valid)
    if valid is not None:
        per_neg = torch.where(valid, per_neg, torch.zeros_like(per_neg))
    return F.softplus(-pos) + per_neg.sum(1)


def bce_loss(pos: Tensor, neg: Tensor, reduction: str = "mean", valid: Tensor | None = None) -> Tensor:
    r"""Pointwise BCE with logits, per pair then averaged over the B pairs.

    - ``reduction="mean"`` (SASRec's weighting, positive and negatives 1:1):
      :math:`\mathrm{softplus}(-s_{ui}) + \frac{1}{N}\sum_j \mathrm{softplus}(s_{uj})`
    - ``reduction="sum"`` (the ICDM paper's formula, every negative weighted like the positive):
      :math:`\mathrm{softplus}(-s_{ui}) + \sum_j \mathrm{softplus}(s_{uj})`

    where :math:`\mathrm{softplus}(-s) = -\log\sigma(s)` and
    :math:`\mathrm{softplus}(s) = -\log(1-\sigma(s))`.

    Returns:
        scalar, mean over the B pairs.
    """
    return bce_terms(pos, neg, reduction, valid).mean()


@LOSSES.register("bce")
class BCE(RecLoss):
    """Binary cross-entropy on logits: the positive labelled 1, each sampled negative 0.

    ``shares_negatives`` is True only with more than one negative per pair. With N = 1 (SASRec's
    setting) a shared draw would hand every row of the batch the same single negative, so the
    whole batch would push one item down per step; with N > 1 each negative's term is
    independent of the others, and a shared uniform draw (minus the row's positives) is as
    good a sample per row as a per-pair one and scores with one matmul.

    Args:
        reduction: "mean" (default; SASRec's code: mean of positive logit losses + mean of
            negative logit losses, i.e. positive and negatives weighted 1:1 per pair) or "sum"
            (each negative weighted like the positive, as in the paper's formula).
        n_negatives: N negatives per pair (1 in SASRec).
    """

    def __init__(self, reduction: str = "mean", n_negatives: int = 1) -> None:
        super().__init__(n_negatives=n_negatives)
        if reduction not in REDUCTIONS:
            raise ConfigError(f"loss.reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
        self.reduction = reduction
        self.shares_negatives = self.n_negatives > 1

    def forward(self, batch: LossBatch) -> Tensor:
        return bce_loss(batch.pos, batch.neg, self.reduction, batch.neg_valid)
