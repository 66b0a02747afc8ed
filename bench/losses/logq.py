r"""Sampled softmax with a logQ correction, and its 2025 correction.

Negatives drawn from a proposal Q (``train.sampler=popularity``: :math:`Q(j) \propto c_j^\alpha`)
make a plain sampled softmax estimate a softmax over items weighted by Q; subtracting
:math:`\log Q(j)` from each sampled logit undoes that (Bengio & Senécal; Yi et al., RecSys 2019).
With scores :math:`s` and temperature :math:`\tau`, :math:`z_j = s_{uj}/\tau`:

- ``logq`` (Yi et al. 2019; TensorFlow's ``sampled_softmax_loss``, whose ``subtract_log_q`` corrects
  the true class too):
  :math:`\ell = -\log \dfrac{e^{z_i - c\log Q(i)}}{e^{z_i - c\log Q(i)} + \sum_j e^{z_j - \log Q(j)}}`,
  c = 1 (``correct_positive=true``, default) or c = 0 (the positive uncorrected, as the baseline
  of the 2025 paper's code does).
- ``logq_corrected`` (Khrylchenko, Baikalov, Makeev, Matveev, Liamaev, "Correcting the LogQ
  Correction", RecSys 2025, arXiv 2507.09331; formula from the authors' public code): the
  positive is always in the full softmax, so it is not a sampled term; the negatives estimate
  the sum over the *other* items by importance sampling, and each position is weighted by the
  current probability of misclassifying it:

  .. math::
      \ell = \mathrm{sg}(1 - \hat p)\Big[-z_i + \log\sum_j e^{z_j - \log Q'(j)}\Big],\qquad
      \hat p = \frac{e^{z_i}}{e^{z_i} + \frac1n \sum_j e^{z_j}/Q'(j)},

  sg = stop-gradient, n the valid negatives, Q' the proposal over the items a draw may be: the
  authors renormalise popularity without the positive; here Q' is exactly what drew the
  negatives (per-pair draws redraw all of the user's training positives, so
  :math:`Q'(j) = Q(j)/(1 - Q(P_u))`; shared draws mask them, Q' = Q).

``logq`` corrects by the global Q, as Yi et al. and TensorFlow do (per-user renormalisation would
shift a user's negatives against its positive). With uniform negatives :math:`\log Q` is then a
constant and ``logq`` with the positive corrected is InfoNCE (``loss=sl loss.self_term=true``)
exactly. A row left without a valid negative (every shared draw one of its positives) has nothing
to contrast and contributes 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import LossBatch
from bench.losses.base import RecLoss, logsumexp_negatives, positive
from bench.losses.registry import LOSSES


def logq_terms(pos: Tensor, neg: Tensor, pos_log_q: Tensor, neg_log_q: Tensor, tau: float,
               correct_positive: bool = True, valid: Tensor | None = None) -> Tensor:
    """(B,) per-pair sampled softmax with logQ correction (see the module).

    Args:
        pos: (B,) scores; neg: (B, N) scores (-inf where ``valid`` is False).
        pos_log_q: (B,) log Q of the positive; neg_log_q: (B, N) log Q of each negative.
        tau: temperature. correct_positive: subtract log Q from the positive's logit too.
        valid: (B, N) bool or None.
    """
    zi = pos / tau - (pos_log_q if correct_positive else 0.0)
    zj = neg / tau - neg_log_q
    if valid is None:
        return torch.logaddexp(zi, torch.logsumexp(zj, 1)) - zi
    zj = torch.where(valid, zj, torch.full_like(zj, float("-inf")))
    terms = torch.logaddexp(zi, logsumexp_negatives(zj, valid)) - zi
    return torch.where(valid.any(1), terms, torch.zeros_like(terms))


def logq_corrected_terms(pos: Tensor, neg: Tensor, neg_log_q: Tensor, tau: float,
                         valid: Tensor | None = None, log_q_kept: Tensor | None = None) -> Tensor:
    """(B,) per-pair corrected logQ loss (Khrylchenko et al. 2025; see the module): the weight
    1 - p̂ carries no gradient. ``log_q_kept`` (B,): log(1 - Q(P_u)) of per-pair draws, which makes
    log Q'(j) = log Q(j) - log(1 - Q(P_u)) the proposal that drew them (None: Q' = Q)."""
    zi = pos / tau
    zj = neg / tau - neg_log_q
    if log_q_kept is not None:
        zj = zj + log_q_kept.unsqueeze(1)
    if valid is not None:
        zj = torch.where(valid, zj, torch.full_like(zj, float("-inf")))
    lse = logsumexp_negatives(zj, valid)
    n = torch.full_like(zi, neg.shape[1]) if valid is None else valid.sum(1).to(zi.dtype)
    with torch.no_grad():
        # p̂ = e^{z_i} / (e^{z_i} + e^{lse} / n); a row without valid negatives has p̂ = 1, weight 0
        p_hat = torch.sigmoid(zi - (lse - torch.log(n.clamp(min=1))))
        p_hat = torch.where(n > 0, p_hat, torch.ones_like(p_hat))
    return (1.0 - p_hat) * (lse - zi)


@LOSSES.register("logq")
class LogQSoftmax(RecLoss):
    """Sampled softmax with the logQ correction (pair it with ``train.sampler=popularity``).

    Args:
        tau: temperature on the scores (cosine scores by default, as SL).
        correct_positive: also subtract log Q(i) from the positive (Yi et al.; TensorFlow). False:
            only the negatives are corrected (the baseline in the 2025 paper's code).
        n_negatives: N.
    """

    uses_log_q = True

    def __init__(self, tau: float = 0.2, correct_positive: bool = True, n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        self.tau = positive("loss.tau", tau)
        self.correct_positive = bool(correct_positive)

    def forward(self, batch: LossBatch) -> Tensor:
        return logq_terms(batch.pos, batch.neg, batch.require("pos_log_q"), batch.require("neg_log_q"), self.tau,
                          self.correct_positive, batch.neg_valid).mean()


@LOSSES.register("logq_corrected")
class CorrectedLogQSoftmax(RecLoss):
    """"Correcting the LogQ Correction" (RecSys 2025): the positive out of the sampled sum and a
    stop-gradient misclassification weight (pair it with ``train.sampler=popularity``).

    Args:
        tau: temperature on the scores (the authors' code uses raw dot products: tau 1 with dot scores).
        n_negatives: N.
    """

    uses_log_q = True

    def __init__(self, tau: float = 0.2, n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        self.tau = positive("loss.tau", tau)

    def forward(self, batch: LossBatch) -> Tensor:
        return logq_corrected_terms(batch.pos, batch.neg, batch.require("neg_log_q"), self.tau, batch.neg_valid,
                                    batch.require("log_q_kept")).mean()
