"""LambdaLoss@K (NDCG-Loss2@K; Wang et al., CIKM 2018; Jagerman et al., SIGIR 2022)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.contracts import LossBatch, TrainData
from bench.errors import ConfigError
from bench.evaluation.metrics import ranks_within
from bench.losses import LOSSES
from bench.losses.base import RecLoss, mean_over_negatives

VARIANTS = ("paper", "reference_code")
RANKS = ("exact", "sampled")


def discount(r: Tensor) -> Tensor:
    """D(r) = 1 / log2(1 + r)."""
    return 1.0 / torch.log2(1.0 + r)


def lambda_weights(rank_pos: Tensor, rank_neg: Tensor, k: int, variant: str = "paper") -> Tensor:
    r"""delta_ij * mu_ij for ranks pi_i (B, 1) and pi_j (B, N) (1 = best; no gradient).

    - paper: delta = |D(|pi_i - pi_j|) - D(|pi_i - pi_j| + 1)|, mu = 1 / (1 - D(max(pi_i, pi_j)))
    - reference_code (SL@K repository): delta = D(|pi_i - pi_j|), mu = 1 / (1 - 1 / max(pi_i, pi_j))

    mu applies only when max(pi_i, pi_j) > K. Rank gaps below 1 (ties) count as 1.
    """
    gap = (rank_pos - rank_neg).abs().clamp(min=1.0)
    top = torch.maximum(rank_pos, rank_neg)
    if variant == "paper":
        # D(g) - D(g+1) = log2((g+2)/(g+1)) / (log2(g+1) log2(g+2)), without cancellation
        delta = torch.log1p(1.0 / (gap + 1.0)) / math.log(2.0) / (torch.log2(gap + 1.0) * torch.log2(gap + 2.0))
        mu = 1.0 / (1.0 - discount(top))
    else:
        delta = discount(gap)
        mu = 1.0 / (1.0 - 1.0 / top)
    return torch.where(top > k, delta * mu, delta)


def exact_ranks(full_scores: Tensor, scores: Tensor) -> Tensor:
    """1 + #{items scoring strictly higher} for each entry of ``scores`` (B, M), against
    the rows of ``full_scores`` (B, I), in the scores' dtype."""
    return ranks_within(full_scores, scores).to(scores.dtype)


def sampled_ranks(pos: Tensor, neg: Tensor, n_items: int) -> tuple[Tensor, Tensor]:
    """Ranks within the sampled set {i} ∪ N, scaled to the catalogue:
    pi_hat = pi_within * |I| / (N + 1) (the paper's LambdaLoss@K-S)."""
    listed = torch.cat([pos.unsqueeze(1), neg], dim=1)
    ranks = exact_ranks(listed, listed) * (n_items / listed.shape[1])  # O(N log N) per row
    return ranks[:, :1], ranks[:, 1:]


@LOSSES.register("lambdalossk")
class LambdaLossAtK(RecLoss):
    r"""LambdaLoss@K (docs/losses.md#lambdalossk):
    :math:`\delta_{ij}\,\mu_{ij}\,\mathrm{softplus}(s_{uj} - s_{ui})`, averaged over pairs and
    negatives, with rank-based weights from the current model.

    Args:
        k: the K of NDCG@K.
        variant: "paper" (Wang et al.'s delta and mu) or "reference_code" (SL@K repository).
        ranks: "exact" (full score rows of the batch's users, in chunks) or "sampled"
            (ranks within the sampled list, scaled: LambdaLoss@K-S).
        n_negatives: N (1 in the reference code).
        chunk: users whose full rows are ranked at once (memory: chunk x |I|).
    """

    def __init__(self, k: int = 20, variant: str = "paper", ranks: str = "exact", n_negatives: int = 1,
                 chunk: int = 256) -> None:
        super().__init__(n_negatives=n_negatives)
        if variant not in VARIANTS:
            raise ConfigError(f"unknown LambdaLoss@K variant '{variant}'; known: {', '.join(VARIANTS)}")
        if ranks not in RANKS:
            raise ConfigError(f"unknown LambdaLoss@K ranks '{ranks}'; known: {', '.join(RANKS)}")
        self.k, self.variant, self.ranks, self.chunk = int(k), variant, ranks, int(chunk)
        self.n_items: int | None = None

    def bind(self, data: TrainData) -> None:
        self.n_items = data.n_items

    def forward(self, batch: LossBatch) -> Tensor:
        pos, neg = batch.pos, batch.neg
        with torch.no_grad():
            if self.ranks == "exact":
                if batch.full_scores is None:
                    raise ConfigError("LambdaLoss@K with exact ranks needs full score rows (LossBatch.full_scores)")
                parts = []
                for rows in torch.arange(pos.numel(), device=pos.device).split(self.chunk):
                    full = batch.full_scores(rows)
                    listed = torch.cat([pos[rows].unsqueeze(1), neg[rows]], dim=1).detach()
                    parts.append(exact_ranks(full, listed))
                ranks = torch.cat(parts)
                rank_pos, rank_neg = ranks[:, :1], ranks[:, 1:]
            else:
                n_items = self.n_items or (neg.shape[1] + 1)
                rank_pos, rank_neg = sampled_ranks(pos.detach(), neg.detach(), n_items)
            weight = lambda_weights(rank_pos, rank_neg, self.k, self.variant)
        return mean_over_negatives(weight * F.softplus(neg - pos.unsqueeze(1)), batch.neg_valid)
