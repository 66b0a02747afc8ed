"""Lambda-weighted pairwise losses: LambdaRank (Burges et al., NIPS 2006), LambdaLoss
(NDCG-Loss2; Wang et al., CIKM 2018) and LambdaLoss@K (Jagerman et al., SIGIR 2022).

All three are softplus(s_uj - s_ui) per (positive, negative) pair, times a weight that is a
function of the current ranks pi_i, pi_j (no gradient): exact ranks from full score rows, or
ranks within the sampled list scaled to the catalogue (the SL@K paper's "-S" variants).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.contracts import LossBatch, TrainData
from bench.errors import ConfigError
from bench.evaluation.metrics import ideal_dcg, ranks_within
from bench.losses.base import RecLoss, list_mean, mean_over_negatives
from bench.losses.ndcg_surrogates import graded_gains, ideal_dcg_at
from bench.losses.registry import LOSSES

VARIANTS = ("paper", "reference_code")
RANKS = ("exact", "sampled")


def discount(r: Tensor) -> Tensor:
    """D(r) = 1 / log2(1 + r)."""
    return 1.0 / torch.log2(1.0 + r)


def discount_gap(lo: Tensor, hi: Tensor) -> Tensor:
    """D(lo) - D(hi) for ranks 1 <= lo <= hi (any broadcastable shapes).

    Written as log2((1 + hi) / (1 + lo)) / (log2(1 + lo) log2(1 + hi)): the plain difference
    of two nearly equal discounts loses every digit for deep ranks in float32.
    """
    return torch.log1p((hi - lo) / (1.0 + lo)) / math.log(2.0) / (torch.log2(1.0 + lo) * torch.log2(1.0 + hi))


def lambda_weights(rank_pos: Tensor, rank_neg: Tensor, k: int | None, variant: str = "paper") -> Tensor:
    r"""delta_ij (times mu_ij when k is set) for ranks pi_i (B, 1) and pi_j (B, N) (1 = best; no gradient).

    - paper: delta = |D(|pi_i - pi_j|) - D(|pi_i - pi_j| + 1)|, mu = 1 / (1 - D(max(pi_i, pi_j)))
    - reference_code (SL@K repository): delta = D(|pi_i - pi_j|), mu = 1 / (1 - 1 / max(pi_i, pi_j))

    mu applies only when k is not None and max(pi_i, pi_j) > k (LambdaLoss@K); k = None is
    the untruncated LambdaLoss (NDCG-Loss2). Rank gaps below 1 (ties) count as 1.
    """
    gap = (rank_pos - rank_neg).abs().clamp(min=1.0)
    if variant == "paper":
        # discount_gap(gap, gap + 1), with its numerator simplified: the (B, N) ops count here
        delta = torch.log1p(1.0 / (gap + 1.0)) / math.log(2.0) / (torch.log2(gap + 1.0) * torch.log2(gap + 2.0))
    else:
        delta = discount(gap)
    if k is None:
        return delta
    top = torch.maximum(rank_pos, rank_neg)
    mu = 1.0 / (1.0 - discount(top)) if variant == "paper" else 1.0 / (1.0 - 1.0 / top)
    return torch.where(top > k, delta * mu, delta)


def lambdarank_weights(rank_pos: Tensor, rank_neg: Tensor) -> Tensor:
    """|Delta DCG_ij| = |D(pi_i) - D(pi_j)| of binary gains, for ranks pi_i (B, 1) and pi_j (B, N).

    Tied ranks count as adjacent (a gap below 1 counts as 1): the two items still hold two
    places of the list, so swapping them changes DCG. Finite for every rank >= 1.
    """
    lo = torch.minimum(rank_pos, rank_neg)
    hi = torch.maximum(torch.maximum(rank_pos, rank_neg), lo + 1.0)
    return discount_gap(lo, hi)


def exact_ranks(full_scores: Tensor, scores: Tensor) -> Tensor:
    """1 + #{items scoring strictly higher} for each entry of ``scores`` (B, M), against
    the rows of ``full_scores`` (B, I), in the scores' dtype."""
    return ranks_within(full_scores, scores).to(scores.dtype)


def sampled_ranks(pos: Tensor, neg: Tensor, n_items: int, valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Ranks within the sampled list {i} ∪ N, scaled to the catalogue:
    pi_hat = pi_within * |I| / (N + 1) (the paper's "-S" variants).

    Args:
        pos: (B,) positive scores; neg: (B, N) negative scores (-inf where ``valid`` is False).
        n_items: |I|.
        valid: (B, N) true negatives (shared draws), or None (all are). Masked columns score
            -inf, so they never outrank a listed item; only the list size N + 1 shrinks to
            1 + #valid.
    Returns:
        (B, 1) and (B, N) scaled ranks, in the scores' dtype.
    """
    listed = torch.cat([pos.unsqueeze(1), neg], dim=1)
    if valid is None:
        scale: Tensor | float = n_items / listed.shape[1]
    else:
        scale = n_items / (1.0 + valid.sum(1, keepdim=True, dtype=listed.dtype))
    ranks = exact_ranks(listed, listed) * scale  # O(N log N) per row
    return ranks[:, :1], ranks[:, 1:]


class LambdaWeighted(RecLoss):
    """Base of the lambda losses: w_ij * softplus(s_uj - s_ui), averaged over the (valid)
    pairs and negatives, where the weight w (:meth:`pair_weights`) depends on ranks only.

    Args:
        ranks: "exact" (full score rows of the batch's queries, in chunks) or "sampled"
            (ranks within the sampled list, scaled to the catalogue: the "-S" variants).
        n_negatives: N (1 in the reference code).
        chunk: rows whose full score rows are ranked at once (memory: chunk x |I|).
    """

    title = "lambda loss"  # the loss's name in messages

    def __init__(self, ranks: str = "exact", n_negatives: int = 1, chunk: int = 256) -> None:
        super().__init__(n_negatives=n_negatives)
        if ranks not in RANKS:
            raise ConfigError(f"loss.ranks='{ranks}' is not a {self.title} rank source; use {' or '.join(RANKS)}")
        if chunk < 1:
            raise ConfigError(f"loss.chunk must be >= 1, got {chunk}")
        self.ranks, self.chunk = ranks, int(chunk)
        self.n_items: int | None = None

    def bind(self, data: TrainData) -> None:
        self.n_items = data.n_items

    def current_ranks(self, batch: LossBatch) -> tuple[Tensor, Tensor]:
        """(P, 1) ranks of the positives and (P, N) of the negatives, 1 = best, no gradient."""
        pos, neg = batch.pos.detach(), batch.neg.detach()
        if self.ranks == "sampled":
            return sampled_ranks(pos, neg, self.n_items or (neg.shape[1] + 1), batch.neg_valid)
        if batch.full_scores is None:
            raise ConfigError(f"{self.title} with loss.ranks=exact needs full score rows (LossBatch.full_scores)")
        parts = []
        for rows in torch.arange(pos.numel(), device=pos.device).split(self.chunk):
            listed = torch.cat([pos[rows].unsqueeze(1), neg[rows]], dim=1)
            parts.append(exact_ranks(batch.full_scores(rows), listed))
        ranks = torch.cat(parts)
        return ranks[:, :1], ranks[:, 1:]

    def pair_weights(self, rank_pos: Tensor, rank_neg: Tensor, batch: LossBatch) -> Tensor:
        """(P, N) weights from ranks (P, 1) and (P, N)."""
        raise NotImplementedError

    def forward(self, batch: LossBatch) -> Tensor:
        with torch.no_grad():
            weight = self.pair_weights(*self.current_ranks(batch), batch)
        return mean_over_negatives(weight * F.softplus(batch.neg - batch.pos.unsqueeze(1)), batch.neg_valid)

    def rank_weights(self, rank_i: Tensor, rank_j: Tensor) -> Tensor:
        """Learning to rank: the weight's rank factor for document pairs with ranks ``rank_i``,
        ``rank_j`` (broadcastable); the list form multiplies it by the pair's gain gap."""
        raise NotImplementedError

    def list_loss(self, scores: Tensor, labels: Tensor, mask: Tensor,
                  generator: torch.Generator | None = None) -> Tensor:
        r"""Graded form: over the pairs :math:`y_i > y_j` of a list,
        :math:`\sum w_{ij}\, \mathrm{softplus}(s_j - s_i)` with
        :math:`w_{ij} = |G_i - G_j| \cdot` :meth:`rank_weights` :math:`(\pi_i, \pi_j)`, where
        :math:`G = (2^y - 1) / \mathrm{IDCG}` (IDCG@K for LambdaLoss@K) and :math:`\pi` the exact
        ranks within the list (1 + the documents scored strictly higher); mean over the lists."""
        s = scores.masked_fill(~mask, 0.0)
        with torch.no_grad():
            gains = graded_gains(labels, mask, s)
            idcg = ideal_dcg_at(gains, getattr(self, "k", None))
            counted = idcg > 0
            g = gains / torch.where(counted, idcg, 1.0)[:, None]
            ranks = 1.0 + (mask[:, None, :] & (s[:, None, :] > s[:, :, None])).sum(2).to(s.dtype)
            y = labels.to(s.dtype)
            above = mask[:, :, None] & mask[:, None, :] & (y[:, :, None] > y[:, None, :])  # [b, i, j]: y_i > y_j
            weight = self.rank_weights(ranks[:, :, None], ranks[:, None, :]) * (g[:, :, None] - g[:, None, :])
            weight = torch.where(above, weight, torch.zeros_like(weight))
        per_list = (weight * F.softplus(s[:, None, :] - s[:, :, None])).sum((1, 2))
        return list_mean(per_list, counted & above.flatten(1).any(1))


@LOSSES.register("lambdaloss")
class LambdaLoss(LambdaWeighted):
    r"""LambdaLoss, NDCG-Loss2 (docs/losses.md#lambdaloss):
    :math:`\delta_{ij}\,\mathrm{softplus}(s_{uj} - s_{ui})`, averaged over pairs and negatives,
    with rank-based weights from the current model.

    Args:
        variant: "paper" (Wang et al.'s delta) or "reference_code" (SL@K repository: D(|gap|)).
        ranks, n_negatives, chunk: see :class:`LambdaWeighted`; ``ranks="sampled"`` is LambdaLoss-S.
    """

    title = "LambdaLoss"

    def __init__(self, variant: str = "paper", ranks: str = "exact", n_negatives: int = 1, chunk: int = 256) -> None:
        super().__init__(ranks=ranks, n_negatives=n_negatives, chunk=chunk)
        if variant not in VARIANTS:
            raise ConfigError(f"loss.variant='{variant}' is not a {self.title} variant; use {' or '.join(VARIANTS)}")
        self.variant = variant
        self.k: int | None = None

    def pair_weights(self, rank_pos: Tensor, rank_neg: Tensor, batch: LossBatch) -> Tensor:
        return lambda_weights(rank_pos, rank_neg, self.k, self.variant)

    def rank_weights(self, rank_i: Tensor, rank_j: Tensor) -> Tensor:
        return lambda_weights(rank_i, rank_j, self.k, self.variant)


@LOSSES.register("lambdalossk")
class LambdaLossAtK(LambdaLoss):
    r"""LambdaLoss@K (docs/losses.md#lambdalossk):
    :math:`\delta_{ij}\,\mu_{ij}\,\mathrm{softplus}(s_{uj} - s_{ui})`, averaged over pairs and
    negatives, with rank-based weights from the current model.

    Args:
        k: the K of NDCG@K (>= 1).
        variant: "paper" (Wang et al.'s delta and mu) or "reference_code" (SL@K repository).
        ranks, n_negatives, chunk: see :class:`LambdaWeighted`; ``ranks="sampled"`` is LambdaLoss@K-S.
    """

    title = "LambdaLoss@K"

    def __init__(self, k: int = 20, variant: str = "paper", ranks: str = "exact", n_negatives: int = 1,
                 chunk: int = 256) -> None:
        super().__init__(variant=variant, ranks=ranks, n_negatives=n_negatives, chunk=chunk)
        if k < 1:
            raise ConfigError(f"loss.k must be >= 1 for LambdaLoss@K, got {k} (loss=lambdaloss has no K)")
        self.k = int(k)


@LOSSES.register("lambdarank")
class LambdaRank(LambdaWeighted):
    r"""LambdaRank (docs/losses.md#lambdarank):
    :math:`|\Delta \mathrm{NDCG}_{ij}|\,\mathrm{softplus}(s_{uj} - s_{ui})` with binary gains,
    :math:`|\Delta \mathrm{DCG}_{ij}| = |D(\pi_i) - D(\pi_j)|`, averaged over pairs and negatives.

    Args:
        idcg: divide by the query's IDCG, over the user's training positives (the formula's
            NDCG; 1 for a sequential prefix, whose one relevant item is the next);
            False (default) keeps |Delta DCG| as the SL@K reference code does.
        ranks, n_negatives, chunk: see :class:`LambdaWeighted`; ``ranks="sampled"`` is LambdaRank-S.
    """

    title = "LambdaRank"
    idcg_table: Tensor

    def __init__(self, idcg: bool = False, ranks: str = "exact", n_negatives: int = 1, chunk: int = 256) -> None:
        super().__init__(ranks=ranks, n_negatives=n_negatives, chunk=chunk)
        if not isinstance(idcg, bool):
            raise ConfigError(f"loss.idcg must be true or false, got {idcg!r}")
        self.idcg = idcg
        # derived from the training data at bind(): not checkpointed
        self.register_buffer("idcg_table", torch.zeros(0), persistent=False)

    def bind(self, data: TrainData) -> None:
        super().bind(data)
        if self.idcg and data.sequences is not None:
            # a sequential row's query is a history prefix with one relevant item, its next one
            self.idcg_table = torch.ones(data.n_users, dtype=torch.float64, device=self.idcg_table.device)
        elif self.idcg:
            self.idcg_table = ideal_dcg(data.train.degrees()).to(self.idcg_table.device)

    def rank_weights(self, rank_i: Tensor, rank_j: Tensor) -> Tensor:
        # graded lists always divide by the IDCG (|Delta NDCG|), whatever loss.idcg says
        return lambdarank_weights(rank_i, rank_j)

    def pair_weights(self, rank_pos: Tensor, rank_neg: Tensor, batch: LossBatch) -> Tensor:
        weight = lambdarank_weights(rank_pos, rank_neg)
        if not self.idcg:
            return weight
        if self.idcg_table.numel() == 0:
            raise ValueError("LambdaRank with loss.idcg=true needs bind(data) first (the users' IDCG)")
        return weight / self.idcg_table[batch.require("users")].to(weight.dtype).unsqueeze(1)
