"""BPR (Rendle et al., UAI 2009)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from bench.contracts import LossBatch
from bench.losses.base import RecLoss
from bench.losses.registry import LOSSES


def bpr_loss(pos: Tensor, neg: Tensor) -> Tensor:
    r"""BPR: :math:`\mathrm{softplus}(s_{uj} - s_{ui}) = -\log \sigma(s_{ui} - s_{uj})`.

    Args:
        pos: (B,) positive scores; neg: (B, N) negative scores.
    Returns:
        scalar, mean over the B pairs and N negatives.
    """
    return F.softplus(neg - pos.unsqueeze(1)).mean()


@LOSSES.register("bpr")
class BPR(RecLoss):
    """Bayesian personalised ranking, one sampled negative per pair by default (dot scores).

    Always per-pair negatives (``shares_negatives = False``): with one negative per pair, a
    shared draw would give every row of a batch the same negative, and the per-pair step is
    already a cheap (B, 1 + N) gather.
    """

    shares_negatives = False

    def __init__(self, n_negatives: int = 1) -> None:
        super().__init__(n_negatives=n_negatives)

    def forward(self, batch: LossBatch) -> Tensor:
        return bpr_loss(batch.pos, batch.neg)
