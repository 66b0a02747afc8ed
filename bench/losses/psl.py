"""PSL: pairwise softmax loss (Yang et al., NeurIPS 2024, arXiv 2411.00163)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses.base import RecLoss, logsumexp_negatives
from bench.losses.registry import LOSSES

_TINY = 1e-12


def _log_tanh1(d: Tensor) -> Tensor:
    # log(tanh(d) + 1) = log 2 + log sigmoid(2d): exact, and finite for any d
    return math.log(2.0) - F.softplus(-2.0 * d)


def _log_relu1(d: Tensor) -> Tensor:
    return torch.log(torch.clamp(d + 1.0, min=_TINY))


def _log_atan1(d: Tensor) -> Tensor:
    # atan(d) + 1 > 0 for d > -tan(1) ~ -1.557, which half-cosine scores (d in [-1, 1]) respect
    return torch.log(torch.clamp(torch.atan(d) + 1.0, min=_TINY))


#: log sigma(d) for each activation sigma
ACTIVATIONS = {"tanh": _log_tanh1, "relu": _log_relu1, "atan": _log_atan1}


def psl_loss(pos: Tensor, neg: Tensor, tau_star: float, activation: str = "tanh", score_scale: float = 0.5,
             valid: Tensor | None = None) -> Tensor:
    r"""PSL per pair, averaged: :math:`\log \sum_{j \in N} \sigma(d_{uij})^{1/\tau^*}
    = \mathrm{logsumexp}_j(\log\sigma(d_{uij})/\tau^*)`, with :math:`d_{uij} = c\,(s_{uj} - s_{ui})`.

    Args:
        pos: (B,) scores; neg: (B, N) scores.
        tau_star: temperature tau*.
        activation: sigma in {"tanh": tanh(d) + 1, "relu": relu(d + 1), "atan": atan(d) + 1}.
        score_scale: c; 0.5 turns cosines into the paper's half cosines (d in [-1, 1]).
        valid: (B, N) true negatives of a shared draw, or None (all).
    Returns:
        scalar.
    """
    d = (neg - pos.unsqueeze(1)) * score_scale
    terms = ACTIVATIONS[activation](d) / tau_star
    if valid is not None:  # relu/atan clamp -inf to a tiny value: mask explicitly
        terms = terms.masked_fill(~valid, float("-inf"))
    return logsumexp_negatives(terms, valid).mean()


@LOSSES.register("psl")
class PairwiseSoftmaxLoss(RecLoss):
    """PSL: SL with exp replaced by a tighter activation of the score difference.

    Args:
        tau_star: temperature, searched in {0.005, 0.0125, 0.025, 0.05, 0.1, 0.25}.
        activation: "tanh" (default), "relu" or "atan".
        score_scale: multiplies score differences; 0.5 = half cosines (the paper).
        n_negatives: N.
    """

    def __init__(self, tau_star: float = 0.1, activation: str = "tanh", score_scale: float = 0.5,
                 n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        if activation not in ACTIVATIONS:
            raise ConfigError(f"unknown PSL activation '{activation}'; known: {', '.join(ACTIVATIONS)}")
        if tau_star <= 0:
            raise ConfigError(f"loss.tau_star must be > 0, got {tau_star}")
        self.tau_star, self.activation, self.score_scale = float(tau_star), activation, float(score_scale)

    def forward(self, batch: LossBatch) -> Tensor:
        return psl_loss(batch.pos, batch.neg, self.tau_star, self.activation, self.score_scale, batch.neg_valid)
