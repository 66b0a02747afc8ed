"""BSL: bilateral softmax loss (Wu et al., 2023)."""

from __future__ import annotations

from torch import Tensor

from bench.contracts import LossBatch
from bench.errors import ConfigError
from bench.losses.base import RecLoss, logsumexp_negatives
from bench.losses.registry import LOSSES


def bsl_loss(pos: Tensor, neg: Tensor, tau1: float, tau2: float, valid: Tensor | None = None) -> Tensor:
    r"""BSL per pair, averaged:
    :math:`-s_{ui}/\tau_1 + (\tau_2/\tau_1) \log \sum_{j \in N} e^{s_{uj}/\tau_2}`.

    With tau1 = tau2 it is SL; tau2 > tau1 softens the negative side (robust to false
    negatives) while the positive keeps tau1.

    Args:
        pos: (B,) scores; neg: (B, N) scores; tau1, tau2: temperatures (> 0).
        valid: (B, N) true negatives of a shared draw (the others hold -inf), or None.
    Returns:
        scalar.
    """
    return (-pos / tau1 + (tau2 / tau1) * logsumexp_negatives(neg / tau2, valid)).mean()


@LOSSES.register("bsl")
class BilateralSoftmaxLoss(RecLoss):
    """BSL with temperatures tau1 (positive side) and tau2 (negative side)."""

    def __init__(self, tau1: float = 0.2, tau2: float = 0.2, n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        if tau1 <= 0 or tau2 <= 0:
            raise ConfigError(f"loss.tau1 and loss.tau2 must be > 0, got {tau1}, {tau2}")
        self.tau1, self.tau2 = float(tau1), float(tau2)

    def forward(self, batch: LossBatch) -> Tensor:
        return bsl_loss(batch.pos, batch.neg, self.tau1, self.tau2, batch.neg_valid)
