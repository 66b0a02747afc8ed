"""AdvInfoNCE: InfoNCE with adversarially learned negative hardness (Zhang et al., NeurIPS 2023)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.contracts import LossBatch, Scorer, TrainData, score_candidates
from bench.errors import ConfigError
from bench.losses.base import RecLoss, logsumexp_negatives
from bench.losses.registry import LOSSES

ADV_SCORES = ("cosine", "dot")


def hardness_log_softmax(hardness: Tensor, valid: Tensor | None = None) -> Tensor:
    """(P, N) log softmax of each row of ``hardness`` over its valid columns (-inf elsewhere;
    a row without valid columns is all -inf)."""
    if valid is not None:
        hardness = hardness.masked_fill(~valid, float("-inf"))
    return hardness - logsumexp_negatives(hardness, valid).unsqueeze(1)


def advinfonce_terms(pos: Tensor, neg: Tensor, hardness: Tensor, tau: float, neg_weight: float,
                     valid: Tensor | None = None) -> Tensor:
    r"""(P,) per-pair AdvInfoNCE terms.

    :math:`-\log \frac{e^{s_{ui}/\tau}}{e^{s_{ui}/\tau} + K \sum_j n_u\, \mathrm{softmax}_j(g_{uj})\, e^{s_{uj}/\tau}}`,
    the softmax over the row's n_u valid negatives, so that a constant g weighs every negative
    by K (InfoNCE with K-weighted negatives).

    Args:
        pos: (P,) positive scores; neg: (P, N) negative scores (-inf where not valid).
        hardness: (P, N) adversary scores g(u, j) (any real values).
        tau: temperature of the backbone's scores (not of g).
        neg_weight: K.
        valid: (P, N) bool, the row's true negatives (shared draws); None = all.
    Returns:
        (P,) terms, finite (0 for a row without valid negatives).
    """
    log_n: Tensor | float = math.log(neg.shape[1]) if valid is None else \
        valid.sum(1, keepdim=True).clamp(min=1).to(neg.dtype).log()
    logits = hardness_log_softmax(hardness, valid) + log_n + math.log(neg_weight) + (neg - pos.unsqueeze(1)) / tau
    # the positive's own term e^0 = 1 in the normaliser keeps every row finite
    return torch.logsumexp(torch.cat([torch.zeros_like(logits[:, :1]), logits], dim=1), dim=1)


def advinfonce_loss(pos: Tensor, neg: Tensor, hardness: Tensor, tau: float, neg_weight: float,
                    valid: Tensor | None = None) -> Tensor:
    """Scalar mean over the P pairs of :func:`advinfonce_terms`."""
    return advinfonce_terms(pos, neg, hardness, tau, neg_weight, valid).mean()


@LOSSES.register("advinfonce")
class AdvInfoNCE(RecLoss):
    r"""AdvInfoNCE (docs/losses.md#advinfonce): :func:`advinfonce_terms` with the hardness
    g(u, j) scored by an adversary, an MF of its own (user and item tables, ``adv_dim`` wide).

    Training alternates by epoch: in epoch e with (e + 1) % adv_every == 0 only the adversary
    learns, by gradient *ascent* on the loss (its own optimiser group, lr ``adv_lr``,
    ``maximize``); the backbone's scores are detached, so the backbone's parameters get no
    gradient and Adam leaves them (and their moments) untouched. In the other epochs the
    adversary's tables are detached and only the backbone learns. The KL ball around uniform
    weights (the paper's eta) is not enforced, as in both reference codes; the last batch's
    mean KL is reported as ``diag/adv_kl``.

    Args:
        tau: temperature of the backbone's scores.
        neg_weight: K, the weight of the negatives (64 in the paper).
        adv_lr: the adversary's learning rate (5e-5).
        adv_every: adversarial epoch period (>= 2; 5 in the paper).
        adv_dim: width of the adversary's tables (64).
        adv_score: g as "cosine" (IR-Benchmark) or "dot" (the original code) of the tables.
        n_negatives: N.
    """

    adv_user: nn.Parameter
    adv_item: nn.Parameter

    def __init__(self, tau: float = 0.2, neg_weight: float = 64.0, adv_lr: float = 5e-5, adv_every: int = 5,
                 adv_dim: int = 64, adv_score: str = "cosine", n_negatives: int = 1000) -> None:
        super().__init__(n_negatives=n_negatives)
        if tau <= 0:
            raise ConfigError(f"loss.tau must be > 0, got {tau}")
        if neg_weight <= 0:
            raise ConfigError(f"loss.neg_weight must be > 0, got {neg_weight}")
        if adv_lr < 0:
            raise ConfigError(f"loss.adv_lr must be >= 0, got {adv_lr}")
        if adv_every < 2:  # 1 would make every epoch adversarial: the backbone would never learn
            raise ConfigError(f"loss.adv_every must be an integer >= 2, got {adv_every}")
        if adv_dim < 1:
            raise ConfigError(f"loss.adv_dim must be >= 1, got {adv_dim}")
        if adv_score not in ADV_SCORES:
            raise ConfigError(f"loss.adv_score must be one of {', '.join(ADV_SCORES)}, got '{adv_score}'")
        self.tau, self.neg_weight, self.adv_lr = float(tau), float(neg_weight), float(adv_lr)
        self.adv_every, self.adv_dim, self.adv_score = int(adv_every), int(adv_dim), adv_score
        # sized by bind(); the same Parameter objects throughout
        self.adv_user = nn.Parameter(torch.zeros(0, self.adv_dim))
        self.adv_item = nn.Parameter(torch.zeros(0, self.adv_dim))
        self.adversarial = False  # this epoch trains the adversary (set per epoch)
        self._last: tuple[Tensor, Tensor | None] | None = None  # last batch's log softmax (diagnostics)

    def bind(self, data: TrainData) -> None:
        device = self.adv_user.device
        user = torch.empty(data.n_users, self.adv_dim, device=device)
        item = torch.empty(data.n_items, self.adv_dim, device=device)
        if self.adv_score == "cosine":  # torch's embedding init, as IR-Benchmark
            nn.init.normal_(user)
            nn.init.normal_(item)
        else:  # the original code's init: small dot products, a mild softmax at the start
            nn.init.xavier_normal_(user)
            nn.init.xavier_normal_(item)
        self.adv_user.data = user
        self.adv_item.data = item

    def on_train_epoch_start(self, epoch: int) -> None:
        self.adversarial = (epoch + 1) % self.adv_every == 0

    alternates_players = True

    @property
    def trains_backbone(self) -> bool:  # type: ignore[override]
        return not self.adversarial

    def optimizer_groups(self, defaults: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"params": [self.adv_user, self.adv_item], "lr": self.adv_lr, "maximize": True}]

    def hardness(self, users: Tensor, negatives: Tensor) -> Tensor:
        """(P,) users, (P, N) item ids -> (P, N) adversary scores g(u, j), with gradient to
        the adversary's tables."""
        if self.adv_user.shape[0] == 0:
            raise RuntimeError("AdvInfoNCE.bind(data) sizes the adversary before the first step")
        cosine = self.adv_score == "cosine"
        queries = self.adv_user[users]
        queries = F.normalize(queries, dim=-1) if cosine else queries
        if negatives.shape[0] > 1 and negatives.stride(0) == 0:  # one shared draw, expanded
            rows = self.adv_item[negatives[0]]
            return queries @ (F.normalize(rows, dim=-1) if cosine else rows).T
        return score_candidates(queries, self.adv_item, negatives, cosine)

    def forward(self, batch: LossBatch) -> Tensor:
        pos, neg, valid = batch.pos, batch.neg, batch.neg_valid
        if self.adversarial:
            pos, neg = pos.detach(), neg.detach()
            hardness = self.hardness(batch.require("users"), batch.require("negatives"))
        else:
            with torch.no_grad():
                hardness = self.hardness(batch.require("users"), batch.require("negatives"))
        self._last = (hardness.detach(), valid)
        return advinfonce_loss(pos, neg, hardness, self.tau, self.neg_weight, valid)

    def diagnostics(self, scorer: Scorer) -> dict[str, float]:
        if self._last is None:
            return {}
        hardness, valid = self._last
        log_p = hardness_log_softmax(hardness, valid)
        log_n: Tensor | float = math.log(hardness.shape[1]) if valid is None else \
            valid.sum(1).clamp(min=1).to(hardness.dtype).log()
        # KL(p || uniform over the row's n valid negatives) = sum_j p_j log p_j + log n
        plogp = torch.where(torch.isneginf(log_p), torch.zeros_like(log_p), log_p.exp() * log_p)
        return {"adv_kl": float((plogp.sum(1) + log_n).mean())}
