"""SL: the sampled softmax loss."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses.base import RecLoss, list_mean, logsumexp_negatives
from bench.losses.registry import LOSSES


def softmax_terms(pos: Tensor, neg: Tensor, tau: float, self_term: bool = False,
                  valid: Tensor | None = None) -> Tensor:
    """(B,) per-pair softmax-loss terms (see :func:`softmax_loss`); ``valid`` (B, N) marks the
    true negatives of shared draws (the others hold -inf)."""
    d = (neg - pos.unsqueeze(1)) / tau
    if self_term:
        d = torch.cat([torch.zeros_like(d[:, :1]), d], dim=1)  # the positive's own d_uii = 0
        valid = None if valid is None else torch.cat([torch.ones_like(valid[:, :1]), valid], dim=1)
    return logsumexp_negatives(d, valid)


def graded_softmax_terms(scores: Tensor, labels: Tensor, mask: Tensor, tau: float,
                         self_term: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    r"""SL on lists with graded labels (``task=ltr``): every relevant document against the
    documents of a lower grade in its list.

    For a list with scores s, grades y and gains :math:`g = 2^y - 1`, a relevant document i
    (:math:`y_i > 0`) has the term
    :math:`\ell_i = \log \sum_{j:\, y_j < y_i} e^{(s_j - s_i)/\tau}` (plus :math:`e^0`, its own,
    with ``self_term``) and the weight :math:`w_i = g_i / \sum_{i'} g_{i'}` over the documents
    that have a term. With binary labels this is the recommendation SL of each (query,
    positive) pair with the non-relevant documents as its negatives; the weights make every
    list count once, its documents in proportion to their gain.

    Args:
        scores: (B, L); labels: (B, L) grades >= 0; mask: (B, L) bool, True = a real document.
        tau: temperature (> 0).
        self_term: the document itself in its normaliser (InfoNCE form).
    Returns:
        terms (B, L) (0 where a document has none), weights (B, L) (each counted row sums
        to 1) and counted (B,) bool: the list has at least one term.
    """
    y = labels.to(scores.dtype)
    s = scores.masked_fill(~mask, 0.0)
    lower = mask[:, None, :] & (y[:, None, :] < y[:, :, None])  # [b, i, j]: j is below i
    has_term = mask & (y > 0) & lower.any(2)
    # (s_j - s_i) / tau; rows without a lower document are zeroed, not -inf, so that neither
    # the value nor the gradient of their log-sum-exp is NaN (torch.where drops them)
    d = ((s[:, None, :] - s[:, :, None]) / tau).masked_fill(~lower, float("-inf"))
    lse = torch.logsumexp(d.masked_fill(~has_term[:, :, None], 0.0), dim=2)
    if self_term:
        lse = torch.logaddexp(lse, torch.zeros_like(lse))
    terms = torch.where(has_term, lse, torch.zeros_like(lse))
    gains = torch.where(has_term, torch.exp2(y) - 1.0, torch.zeros_like(y))
    weights = gains / gains.sum(1, keepdim=True).clamp(min=torch.finfo(gains.dtype).tiny)
    return terms, weights, has_term.any(1)


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

    def list_loss(self, scores: Tensor, labels: Tensor, mask: Tensor,
                  generator: torch.Generator | None = None) -> Tensor:
        """Graded SL (:func:`graded_softmax_terms`), mean over the lists."""
        terms, weights, counted = graded_softmax_terms(scores, labels, mask, self.tau, self.self_term)
        return list_mean((weights * terms).sum(1), counted)
