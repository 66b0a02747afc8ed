"""SL: the sampled softmax loss."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses import LOSSES
from bench.losses.base import RecLoss, logsumexp_negatives


def softmax_terms(pos: Tensor, neg: Tensor, tau: float, self_term: bool = False,
                  valid: Tensor | None = None) -> Tensor:
    """(B,) per-pair softmax-loss terms (see :func:`softmax_loss`); ``valid`` (B, N) marks the
    true negatives of shared draws (the others hold -inf)."""
    d = (neg - pos.unsqueeze(1)) / tau
    if self_term:
        d = torch.cat([torch.zeros_like(d[:, :1]), d], dim=1)  # the positive's own d_uii = 0
        valid = None if valid is None else torch.cat([torch.ones_like(valid[:, :1]), valid], dim=1)
    return logsumexp_negatives(d, valid)


def softmax_loss(pos: Tensor, neg: Tensor, tau: float, self_term: bool = False) -> Tensor:
    r"""Sampled softmax loss, per pair then averaged.

    With :math:`d_{uij} = s_{uj} - s_{ui}`:

    - ``self_term=False`` (SL@K reference code): :math:`\log \sum_{j \in N} e^{d_{uij}/\tau}`
    - ``self_term=True`` (InfoNCE, the theory's form):
      :math:`\log(1 + \sum_{j \in N} e^{d_{uij}/\tau}) = -\log \mathrm{softmax}_i(\{i\} \cup N)`

    Args:
        pos: (B,) positive scores; neg: (B, N) negative scores.
        tau: temperature (> 0).
        self_term: include the positive in the normaliser.
    Returns:
        scalar mean over the B pairs.
    """
    return softmax_terms(pos, neg, tau, self_term).mean()


@LOSSES.register("sl")
class SoftmaxLoss(RecLoss):
    """Sampled softmax loss (SL), cosine scores by default.

    Args:
        tau: temperature; the paper searches {0.01, 0.025, 0.05, 0.1, 0.2, 0.5}.
        self_term: False = the SL@K paper's code (negatives only); True = InfoNCE.
        n_negatives: N negatives per pair (1000 in the paper).
    """

    def __init__(self, tau: float = 0.2, self_term: bool = False, n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        if tau <= 0:
            raise ConfigError(f"loss.tau must be > 0, got {tau}")
        self.tau = float(tau)
        self.self_term = bool(self_term)

    def forward(self, batch: LossBatch) -> Tensor:
        return softmax_terms(batch.pos, batch.neg, self.tau, self.self_term, batch.neg_valid).mean()
