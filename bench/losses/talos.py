r"""Talos (Zhang et al., WWW 2026, arXiv 2601.19276): a quantile-threshold loss for Precision@K and
Recall@K, the closest relative of SL@K.

Each user has a threshold :math:`\beta_u`, meant to be its score at rank K (the
:math:`1 - K/|I|` quantile of its scores), *learned* by quantile regression on the step's scores
(without their gradient), importance-weighted so that the sampled negatives stand for all of the
user's non-positives:

.. math::
    Q_K(u) = \frac{1}{|I|}\Big[\sum_{i\in P_u}\rho_K(s_{ui}-\beta_u) + w_u\sum_{j\in N}\rho_K(s_{uj}-\beta_u)\Big],
    \quad w_u = \frac{|I|-|P_u|}{|N|},\quad \rho_K(x) = (1-\tfrac{K}{|I|})(x)_+ + \tfrac{K}{|I|}(-x)_+ .

The model is trained, with :math:`\beta_u` held fixed, on the upper bound of
:math:`-\log\mathrm{Precision@K}` with a temperature *outside* the sigmoid,
:math:`\sigma_\tau(x) = \sigma(x)^{1/\tau}`:

.. math::
    \ell_{ui} = -\log\frac{\sigma_\tau(s_{ui}-\beta_u)}{\sum_{j\in N}\sigma_\tau(s_{uj}-\beta_u)}
              = \log\sum_{j\in N} e^{\log\sigma(s_{uj}-\beta_u)/\tau} - \log\sigma(s_{ui}-\beta_u)/\tau .

Both terms are minimised in the same step: β only receives the quantile-regression gradient (its
own optimiser group, Adam at ``beta_lr``), the model only the ranking term's.

How its threshold differs from SL@K's β: SL@K *estimates* β (the K-th largest of the user's
positives' and N sampled negatives' scores, refreshed every ``t_beta`` epochs) and uses it only in a
sigmoid *weight* on each positive's SL term, :math:`\sigma((s_{ui}-\beta_u)/\tau_w)`; Talos
*learns* β by a quantile regression that is unbiased for the full-catalogue pinball loss, every
step, and puts it inside the numerator and the denominator of a softmax-like ratio, with one
temperature.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.contracts import LossBatch, TrainData
from bench.datasets.base import CSR
from bench.errors import ConfigError
from bench.losses.base import RecLoss, logsumexp_negatives, positive
from bench.losses.registry import LOSSES


def pinball(x: Tensor, q: float) -> Tensor:
    """ρ for the (1 - q) quantile: (1 - q)·relu(x) + q·relu(-x), elementwise."""
    return (1.0 - q) * F.relu(x) + q * F.relu(-x)


def talos_terms(pos: Tensor, neg: Tensor, beta: Tensor, tau: float, valid: Tensor | None = None) -> Tensor:
    """(B,) per-pair Talos ranking term for thresholds ``beta`` (B,) (no gradient is taken through
    them here: pass them detached)."""
    log_pos = F.logsigmoid(pos - beta) / tau
    log_neg = F.logsigmoid(neg - beta.unsqueeze(1)) / tau  # -inf (masked) stays -inf
    terms = logsumexp_negatives(log_neg, valid) - log_pos
    # a row left without a valid negative (every shared draw one of its positives) has no ratio: 0
    return terms if valid is None else torch.where(valid.any(1), terms, torch.zeros_like(terms))


def quantile_terms(pos_scores: Tensor, pos_mask: Tensor, neg: Tensor, beta: Tensor, k: int, n_items: int,
                   valid: Tensor | None = None) -> Tensor:
    """(B,) the sampled quantile-regression loss Q_K of each row's user (see the module).

    Args:
        pos_scores: (B, L) scores of every training positive of the row's user (padded), no gradient.
        pos_mask: (B, L) bool, the real positives.
        neg: (B, N) the row's sampled negatives' scores, no gradient (-inf where not ``valid``).
        beta: (B,) thresholds, with gradient.
        k: K. n_items: |I|.
    """
    q = k / n_items
    on_pos = torch.where(pos_mask, pinball(pos_scores - beta[:, None], q), torch.zeros_like(pos_scores)).sum(1)
    n_valid = neg.new_full(beta.shape, neg.shape[1]) if valid is None else valid.sum(1).to(neg.dtype)
    neg_terms = pinball(neg - beta[:, None], q)
    if valid is not None:
        neg_terms = torch.where(valid, neg_terms, torch.zeros_like(neg_terms))
    weight = (n_items - pos_mask.sum(1).to(neg.dtype)) / n_valid.clamp(min=1)
    return (on_pos + weight * neg_terms.sum(1)) / n_items


@LOSSES.register("talos")
class Talos(RecLoss):
    """Talos: a learned per-user rank-K threshold inside a sigmoid-power softmax.

    Args:
        k: K of the targeted Precision@K / Recall@K (20).
        tau: the temperature outside the sigmoid (searched on SL's grid, {0.05, ..., 0.30}).
        beta_lr: Adam learning rate of the thresholds (1e-3, fixed in the paper).
        n_negatives: N (1024 in the paper).
    """

    beta: nn.Parameter

    def __init__(self, k: int = 20, tau: float = 0.15, beta_lr: float = 1e-3, n_negatives: int = 1024) -> None:
        super().__init__(n_negatives=n_negatives)
        if k < 1:
            raise ConfigError(f"loss.k must be >= 1, got {k}")
        self.k, self.tau, self.beta_lr = int(k), positive("loss.tau", tau), positive("loss.beta_lr", beta_lr)
        self.beta = nn.Parameter(torch.zeros(0))  # sized by bind(); the same Parameter throughout
        self.positives: CSR | None = None  # the training positives, for the quantile regression
        self.n_items = 0

    def bind(self, data: TrainData) -> None:
        if data.sequences is not None:
            raise ConfigError("loss=talos learns one threshold per user; task=seq ranks for history prefixes: "
                              "use task=cf or linkpred")
        self.beta.data = torch.zeros(data.n_users, device=self.beta.device)
        self.positives, self.n_items = data.train, data.n_items

    def optimizer_groups(self, defaults: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"params": [self.beta], "lr": self.beta_lr, "weight_decay": 0.0}]

    def forward(self, batch: LossBatch) -> Tensor:
        if self.positives is None:
            raise RuntimeError("Talos.bind(data) sizes the thresholds before the first step")
        users = batch.require("users")
        beta = self.beta[users]
        ranking = talos_terms(batch.pos, batch.neg, beta.detach(), self.tau, batch.neg_valid)
        with torch.no_grad():
            ids, mask = self.positives.on(users.device).padded_rows(users)
            pos_scores = batch.require("scorer").score_items(users, ids)
        quantile = quantile_terms(pos_scores, mask, batch.neg.detach(), beta, self.k, self.n_items, batch.neg_valid)
        return ranking.mean() + quantile.mean()

    def diagnostics(self, scorer: Any) -> dict[str, float]:
        return {"beta_mean": float(self.beta.detach().mean())} if self.beta.numel() else {}
