"""Ranking helpers shared by the metrics, the losses and the diagnostics: tie-exact top-K
lists, ranks within score rows, per-user hit statistics and the ideal DCG."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from bench.evaluation.ties import TieGroups

_TABLES: dict[torch.device, tuple[Tensor, Tensor]] = {}


def _tables(length: int, device: torch.device | str) -> tuple[Tensor, Tensor]:
    """(discounts, their running sums), float64, at least ``length`` long: one pair per device,
    grown on demand and shared read-only, since every metric of every chunk reads them."""
    device = torch.device(device)
    tables = _TABLES.get(device)
    if tables is None or tables[0].numel() < length:
        ranks = torch.arange(1, max(length, 128) + 1, dtype=torch.float64, device=device)
        discount = 1.0 / torch.log2(ranks + 1.0)
        tables = _TABLES[device] = (discount, torch.cumsum(discount, 0))
    return tables


def discounts(length: int, device: torch.device | str = "cpu") -> Tensor:
    """(length,) float64 1 / log2(r + 1) for ranks r = 1 .. length."""
    return _tables(length, device)[0][:length]


def ideal_dcg(n_relevant: Tensor, k: int | None = None) -> Tensor:
    """IDCG@K = sum_{r=1}^{min(K, n)} 1 / log2(r + 1) per user.

    Args:
        n_relevant: (B,) relevant items per user (counts below 1 count as 1).
        k: the cut-off; None = no cut-off (every relevant item).
    Returns:
        (B,) float64.
    """
    n = n_relevant.to(torch.float64).clamp(min=1, max=k)
    length = int(k if k is not None else n.max())
    return _tables(length, n.device)[1][(n - 1).long()]


# up to this many scores per row, counting the higher entries is cheaper than sorting the row
_COUNT_MAX_M = 8


def ranks_within(full: Tensor, scores: Tensor) -> Tensor:
    """1 + #{entries of the row of ``full`` scoring strictly higher}, for each score.

    Args:
        full: (B, I) score rows.
        scores: (B, M) scores to place in their row.
    Returns:
        (B, M) int64 ranks (1 = best; tied scores share the better rank). For a few scores
        per row (M <= ``_COUNT_MAX_M``) a direct count, O(M·I) per row; otherwise a sort and a
        binary search, O(I log I), with no (B, M, I) tensor. Both give the same integers.
    """
    if scores.shape[1] <= _COUNT_MAX_M:
        # the lambda losses place 2 scores (positive + one negative) per row: counting
        # beats sorting the row (lambda-loss steps 6-8x faster on Health at one thread;
        # results/speed/2026-12-03-lambda-ranks.md)
        return 1 + torch.stack([(full > scores[:, m : m + 1]).sum(1) for m in range(scores.shape[1])], dim=1)
    ascending = torch.sort(full, dim=1).values
    above = full.shape[1] - torch.searchsorted(ascending, scores.contiguous(), right=True)
    return 1 + above


@dataclass
class HitStats:
    """Per-user statistics of ranked lists that every metric reads.

    Attributes:
        hits: (B, L) float64, 1 where the item at rank r + 1 is relevant.
        n_relevant: (B,) float64 relevant items per user.
        cum_hits, cum_dcg: (B, L) running hit count and DCG down the list.
        first_hit: (B,) float64 rank of the first hit, L + 1 when none.
        ties: the lists' tie groups when ``hits`` are expectations over the orders of tied
            items (``eval.ties=expected``): a metric that is not linear in the hits (HitRate,
            MRR) reads them for its closed form; None when every hit is 0 or 1.
    """

    hits: Tensor
    n_relevant: Tensor
    cum_hits: Tensor
    cum_dcg: Tensor
    first_hit: Tensor
    ties: TieGroups | None = None

    @property
    def length(self) -> int:
        return self.hits.shape[1]

    @classmethod
    def from_hits(cls, hits: Tensor, n_relevant: Tensor, ties: TieGroups | None = None) -> HitStats:
        """Args: hits (B, L) bool/0-1 relevance of each ranked list (or, with ``ties``, the
        probability that each position is relevant); n_relevant (B,) >= 1."""
        hits = hits.to(torch.float64)
        n_rel = n_relevant.to(torch.float64)
        if (n_rel < 1).any():
            raise ValueError("every user needs at least one relevant item; exclude the others")
        length = hits.shape[1]
        discount = discounts(length, hits.device)
        any_hit = hits.bool().any(1)
        first = torch.where(any_hit, hits.bool().to(torch.int8).argmax(1).to(torch.float64) + 1.0,
                            torch.full_like(n_rel, float(length + 1)))
        return cls(hits, n_rel, torch.cumsum(hits, 1), torch.cumsum(hits * discount, 1), first, ties)

    def hits_at(self, k: int) -> Tensor:
        """(B,) relevant items within the top K."""
        if not self.length:
            return torch.zeros_like(self.n_relevant)
        return self.cum_hits[:, min(k, self.length) - 1]

    def dcg_at(self, k: int) -> Tensor:
        """(B,) DCG@K."""
        if not self.length:
            return torch.zeros_like(self.n_relevant)
        return self.cum_dcg[:, min(k, self.length) - 1]


@dataclass
class RankedList:
    """The best items of score rows, ties broken by lower item index.

    Attributes:
        items: (B, L) int64 item indices, best first.
        scores: (B, L) their scores.
        straddles: (B,) bool, the score at the last position is shared by an item past
            the list (a tie group that the list's end splits).
    """

    items: Tensor
    scores: Tensor
    straddles: Tensor


def ranked_list(scores: Tensor, k: int) -> RankedList:
    """The ``k`` best items per row with their scores, ties broken by lower item index.

    ``torch.topk`` leaves the order of equal scores unspecified; here a tie is always
    resolved in favour of the smaller item id, both inside the list and at its cut-off,
    so results do not depend on the kernel.

    Args:
        scores: (B, I) scores; masked items should hold -inf.
        k: list length (clamped to I).
    """
    n_rows, n_items = scores.shape
    k = min(k, n_items)
    if k == 0:
        empty = torch.empty(n_rows, 0, dtype=torch.int64, device=scores.device)
        return RankedList(empty, scores[:, :0], torch.zeros(n_rows, dtype=torch.bool, device=scores.device))
    probe = min(k + 1, n_items)
    vals, idx = torch.topk(scores, probe, dim=1)
    # topk sorts by value; equal values are adjacent but in unspecified order. Only rows
    # with a tie are re-ordered (by index first, then a stable sort by value).
    tied = (vals[:, 1:] == vals[:, :-1]).any(1)
    if tied.any():
        rows = tied.nonzero().squeeze(1)
        idx_sorted, perm = torch.sort(idx[rows], dim=1)
        order = torch.sort(vals[rows].gather(1, perm), dim=1, descending=True, stable=True).indices
        idx[rows] = idx_sorted.gather(1, order)
    idx = idx[:, :k].clone()
    straddles = torch.zeros(n_rows, dtype=torch.bool, device=scores.device)
    if probe > k:
        # a tie straddling the cut-off: the top-(k+1) may hold any of the tied items,
        # so those rows are ranked exactly with a full stable sort
        straddles = vals[:, k - 1] == vals[:, k]
        if straddles.any():
            rows = straddles.nonzero().squeeze(1)
            idx[rows] = torch.sort(scores[rows], dim=1, descending=True, stable=True).indices[:, :k]
    return RankedList(idx, vals[:, :k], straddles)


def rank_items(scores: Tensor, k: int) -> Tensor:
    """Indices of the ``k`` best items per row, ties broken by lower item index
    (:func:`ranked_list`'s items): (B, min(k, I)) int64, best first."""
    return ranked_list(scores, k).items
