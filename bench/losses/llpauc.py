"""LLPAUC: lower-left partial AUC (Shi et al., WWW 2024), a min-max point-wise loss."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.contracts import LossBatch, Scorer
from bench.errors import ConfigError
from bench.losses.base import RecLoss, mean_over_negatives
from bench.losses.registry import LOSSES

VARIANTS = ("paper", "reference_code")

# projection ranges of the auxiliary variables (the authors' code and IR-Benchmark)
A_RANGE = B_RANGE = (0.0, 1.0)
S_POS_RANGE = (-1.0, 4.0)
S_NEG_RANGE = (0.0, 5.0)
GAMMA_MAX = 1.0
# the ascent variables s+, gamma and the threshold s- learn at this multiple of the optimiser's
# lr (both reference codes)
AUX_LR_SCALE = 2.0


def llpauc_objective(f_pos: Tensor, f_neg: Tensor, a: Tensor, b: Tensor, gamma: Tensor, s_neg: Tensor,
                     theta_b: Tensor, alpha: float, beta: float, kappa: float = 5.0, w: float = 0.0,
                     s_pos: Tensor | None = None, theta_a: Tensor | None = None,
                     valid: Tensor | None = None) -> Tensor:
    r"""The LLPAUC min-max objective F on squashed scores (see :class:`LLPAUC`).

    With :math:`\ell_+(f) = (f-a)^2 - 2(1+\gamma) f`, :math:`\ell_-(f) = (f-b)^2 + 2(1+\gamma) f`
    and :math:`r_\kappa(x) = \log(1 + e^{\kappa x})/\kappa`:

    - two-way (``s_pos`` and ``theta_a`` given):
      :math:`-s^+ - \frac{1}{\alpha}\,\mathrm{mean}_i\, r_\kappa(-\ell_+(f_i) - s^+)
      + s^- + \frac{1}{\beta}\,\mathrm{mean}_j\, r_\kappa(\ell_-(f_j) - s^-) - (w+1)\gamma^2
      + \theta_a (a + \gamma) + \theta_b (\gamma + 1 - b)`
    - one-way (``s_pos`` and ``theta_a`` None): the positive part is :math:`\mathrm{mean}_i\,\ell_+(f_i)`
      (every positive counts) and there is no :math:`\theta_a` term.

    Args:
        f_pos: (P,) positive scores in [0, 1]; f_neg: (P, N) negative scores in [0, 1].
        a, b, gamma, s_neg, theta_b, s_pos, theta_a: 0-dim auxiliary variables.
        alpha: TPR bound (two-way only); beta: FPR bound.
        kappa: softplus sharpness of r_kappa.
        w: extra concavity in gamma (0 in both reference codes).
        valid: (P, N) bool, the true negatives (shared draws); the negative mean is over these
            only, and the other columns may hold anything (they never reach the arithmetic).
    Returns:
        scalar F: means over the P positives and over all valid (row, negative) entries.
    """
    if valid is not None:
        f_neg = torch.where(valid, f_neg, torch.zeros_like(f_neg))
    one_plus = 1 + gamma
    neg_loss = (f_neg - b).square() + 2 * one_plus * f_neg
    pos_loss = (f_pos - a).square() - 2 * one_plus * f_pos
    value = s_neg + mean_over_negatives(F.softplus(neg_loss - s_neg, beta=kappa), valid) / beta
    value = value - (w + 1) * gamma.square() + theta_b * (gamma + 1 - b)
    if s_pos is None or theta_a is None:
        return value + pos_loss.mean()
    return value - s_pos - F.softplus(-pos_loss - s_pos, beta=kappa).mean() / alpha + theta_a * (a + gamma)


@LOSSES.register("llpauc")
class LLPAUC(RecLoss):
    r"""LLPAUC (docs/losses.md#llpauc): the lower-left partial AUC (TPR <= alpha, FPR <= beta)
    by its min-max surrogate :func:`llpauc_objective` on scores :math:`f = \sigma(s / \tau)`.

    The thresholds and the AUC square-loss variables are parameters of the loss, trained by
    the task's optimiser: the backbone, a, b, s- and the multipliers theta descend; s+ and
    gamma are the max player. After every step they are projected to their ranges (a, b in
    [0, 1], s+ in [-1, 4], s- in [0, 5], gamma in [max(-a, b - 1), 1]; paper: theta >= 0).

    Args:
        alpha: TPR bound in (0, 1] (two-way only); the paper searches {.1, .3, .5, .7, .9}.
        beta: FPR bound in (0, 1]; the paper searches {.01, .1}.
        one_way: only the FPR bound (all positives count, as the authors' one-way code).
        variant: "paper" (s+ and gamma ascend: a Lagrangian min-max, as the authors' trainer)
            or "reference_code" (IR-Benchmark: every variable descends).
        kappa: sharpness of the softplus that smooths the hinge (5 in both codes).
        w: the objective's concavity term is -(w + 1) gamma^2; the paper's analysis takes
            w > 4 kappa, both codes 0.
        tau: score temperature inside the sigmoid; 1 = sigmoid(cosine), as both codes.
        n_negatives: N.
    """

    s_pos: nn.Parameter | None
    theta_a: nn.Parameter | None

    def __init__(self, alpha: float = 0.7, beta: float = 0.1, one_way: bool = False, variant: str = "paper",
                 kappa: float = 5.0, w: float = 0.0, tau: float = 1.0, n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        if not 0 < alpha <= 1:
            raise ConfigError(f"loss.alpha must be in (0, 1], got {alpha}")
        if not 0 < beta <= 1:
            raise ConfigError(f"loss.beta must be in (0, 1], got {beta}")
        if variant not in VARIANTS:
            raise ConfigError(f"loss.variant must be one of {', '.join(VARIANTS)}, got '{variant}'")
        if kappa <= 0:
            raise ConfigError(f"loss.kappa must be > 0, got {kappa}")
        if w < 0:
            raise ConfigError(f"loss.w must be >= 0, got {w}")
        if tau <= 0:
            raise ConfigError(f"loss.tau must be > 0, got {tau}")
        self.alpha, self.beta, self.kappa, self.w = float(alpha), float(beta), float(kappa), float(w)
        self.tau = float(tau)
        self.one_way, self.variant = bool(one_way), variant
        # initial values of both codes, each inside its range
        self.a = nn.Parameter(torch.tensor(1.0))
        self.b = nn.Parameter(torch.tensor(0.0))
        self.gamma = nn.Parameter(torch.tensor(0.0))
        self.s_neg = nn.Parameter(torch.tensor(0.5))
        self.theta_b = nn.Parameter(torch.tensor(0.5))
        # the one-way objective does not use them: no parameters without a gradient (DDP)
        self.s_pos = None if self.one_way else nn.Parameter(torch.tensor(0.5))
        self.theta_a = None if self.one_way else nn.Parameter(torch.tensor(0.5))

    def forward(self, batch: LossBatch) -> Tensor:
        # masked shared columns (-inf, squashed to 0) are dropped inside llpauc_objective
        return llpauc_objective(torch.sigmoid(batch.pos / self.tau), torch.sigmoid(batch.neg / self.tau), self.a,
                                self.b, self.gamma, self.s_neg, self.theta_b, self.alpha, self.beta, self.kappa,
                                self.w, s_pos=self.s_pos, theta_a=self.theta_a, valid=batch.neg_valid)

    def optimizer_groups(self, defaults: Mapping[str, Any]) -> list[dict[str, Any]]:
        lr = AUX_LR_SCALE * float(defaults["lr"])
        ascent = [self.gamma] if self.s_pos is None else [self.s_pos, self.gamma]
        if self.variant == "reference_code":
            return [{"params": [*ascent, self.s_neg], "lr": lr, "maximize": False}]
        return [{"params": ascent, "lr": lr, "maximize": True}, {"params": [self.s_neg], "lr": lr, "maximize": False}]

    @torch.no_grad()
    def after_step(self, batch: LossBatch) -> None:
        self.a.clamp_(*A_RANGE)
        self.b.clamp_(*B_RANGE)
        self.s_neg.clamp_(*S_NEG_RANGE)
        if self.s_pos is not None:
            self.s_pos.clamp_(*S_POS_RANGE)
        # Omega_gamma = [max(-a, b - 1), 1], with the projected a and b
        self.gamma.clamp_(max=GAMMA_MAX)
        self.gamma.copy_(torch.maximum(self.gamma, torch.maximum(-self.a, self.b - 1)))
        if self.variant == "paper":  # Lagrange multipliers of the gamma constraint are >= 0
            self.theta_b.clamp_(min=0.0)
            if self.theta_a is not None:
                self.theta_a.clamp_(min=0.0)

    def diagnostics(self, scorer: Scorer) -> dict[str, float]:
        names = ("a", "b", "gamma", "s_neg", "theta_b", "s_pos", "theta_a")
        values = {name: getattr(self, name) for name in names}
        return {f"llpauc_{name}": float(value.detach()) for name, value in values.items() if value is not None}
