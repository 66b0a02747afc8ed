r"""Margin losses on sampled negatives: CCL (SimpleX) and SimCE.

- **CCL**, the cosine contrastive loss of SimpleX (Mao et al., CIKM 2021), on cosine scores:
  :math:`\ell_{ui} = (1 - s_{ui})_+ + \frac{w}{|N|}\sum_{j \in N}(s_{uj} - m)_+`: negatives below the
  margin m cost nothing, and w weighs the *mean* of the rest (the authors' RecBox code sums over
  the negatives when no weight is given: w = |N|). Defaults differ by code base (RecBox m = 0 and a
  sum; RecBole m = 0.5, w = 10; the authors' tuned RecZoo configs m 0.4-0.9, w 150-300 with
  1000-2000 negatives).
- **SimCE** (Yang et al., "SimCE: Simplifying Cross-Entropy Loss for Collaborative Filtering",
  arXiv 2406.16170; formula from the authors' code, the paper's body was not available): a hinge on
  the hardest sampled negative, :math:`\ell_{ui} = (m - s_{ui} + \max_{j \in N} s_{uj})_+`, on raw dot
  products. The authors' defaults disagree: margin 1 (code), 5 (README), 10 (run script).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses.base import RecLoss, row_mean
from bench.losses.registry import LOSSES


def ccl_terms(pos: Tensor, neg: Tensor, margin: float, weight: float | None,
              valid: Tensor | None = None) -> Tensor:
    """(B,) per-pair CCL: relu(1 - s⁺) + w · mean_j relu(s_j - m) (the sum over valid negatives when
    ``weight`` is None)."""
    per_neg = F.relu(neg - margin)  # -inf (masked) -> 0
    if weight is None:
        hinge = per_neg.sum(1) if valid is None else torch.where(valid, per_neg, torch.zeros_like(per_neg)).sum(1)
    else:
        hinge = weight * row_mean(per_neg, valid)
    return F.relu(1.0 - pos) + hinge


def simce_terms(pos: Tensor, neg: Tensor, margin: float) -> Tensor:
    """(B,) per-pair SimCE: relu(m - s⁺ + max_j s_j) (masked negatives hold -inf: never the max)."""
    return F.relu(margin - pos + neg.max(1).values)


@LOSSES.register("ccl")
class CCL(RecLoss):
    """SimpleX's cosine contrastive loss.

    Args:
        margin: m in [-1, 1] (0.9 in the authors' Gowalla and Yelp configs).
        negative_weight: w, the weight of the mean over the negatives; null = their sum (w = N).
        n_negatives: N.
    """

    def __init__(self, margin: float = 0.9, negative_weight: float | None = 150.0, n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        if not -1.0 <= margin <= 1.0:
            raise ConfigError(f"loss.margin must be in [-1, 1] (cosine scores), got {margin}")
        if negative_weight is not None and negative_weight < 0:
            raise ConfigError(f"loss.negative_weight must be >= 0 or null (the sum), got {negative_weight}")
        self.margin = float(margin)
        self.negative_weight = None if negative_weight is None else float(negative_weight)

    def forward(self, batch: LossBatch) -> Tensor:
        return ccl_terms(batch.pos, batch.neg, self.margin, self.negative_weight, batch.neg_valid).mean()


@LOSSES.register("simce")
class SimCE(RecLoss):
    """SimCE: a hinge between the positive and the hardest of the sampled negatives.

    Args:
        margin: m (1 in the authors' code).
        n_negatives: N (10 in the authors' code, 64 in their README's example).
    """

    def __init__(self, margin: float = 1.0, n_negatives: int = 64) -> None:
        super().__init__(n_negatives=n_negatives)
        if margin < 0:
            raise ConfigError(f"loss.margin must be >= 0, got {margin}")
        self.margin = float(margin)

    def forward(self, batch: LossBatch) -> Tensor:
        return simce_terms(batch.pos, batch.neg, self.margin).mean()
