"""Tied scores in a ranked list: which positions share a score, and the relevance each
position holds under each rule for ordering tied items (docs/evaluation.md#ties).

A *tie group* is a maximal run of list positions with equal scores. The group that holds the
list's last position may continue past the list (more items share that score than fit);
its size and relevant count are then those of every tied item of the row, not only the
listed ones, so no rule depends on which tied items the list happened to show.

Rules (``eval.ties``):

- ``expected``: the exact expectation over all orders of each group's items (McSherry and
  Najork, ECIR 2008). Every position of a group of n items with r relevant is relevant with
  probability r / n, which gives Recall, Precision and NDCG (linear in the hits) exactly;
  HitRate and MRR take closed forms over the group at the cut-off and the first group
  holding a relevant item (:func:`expected_hit`, :func:`expected_mrr`).
- ``optimistic`` / ``pessimistic``: relevant items first / last inside every group.
- ``lowest_id``: the lower item id first (deterministic, but not neutral).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from bench.errors import ConfigError

TIE_MODES = ("expected", "optimistic", "pessimistic", "lowest_id")
#: the rules that order every group one way; their metrics bracket every other order
BOUNDS = ("pessimistic", "optimistic")


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`TIE_MODES`, else a one-line :class:`ConfigError`."""
    if mode not in TIE_MODES:
        raise ConfigError(f"eval.ties={mode} is not a tie rule; use one of {', '.join(TIE_MODES)}")
    return mode


@dataclass
class TieGroups:
    """The tie group of every position of ranked lists.

    Attributes:
        start: (B, L) int64 0-based first position of the position's group.
        size: (B, L) float64 items in the group (for a group that continues past the list:
            all items of the row with that score).
        relevant: (B, L) float64 relevant items in the group (counted the same way).
        tied: (B, L) bool, the position shares its score with the next item (the one at
            the next position, or past the list's end): a cut-off after it splits a group.
    """

    start: Tensor
    size: Tensor
    relevant: Tensor
    tied: Tensor
    _rr_sums: Tensor | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_list(cls, list_scores: Tensor, hits: Tensor, straddles: Tensor, tail_size: Tensor,
                  tail_relevant: Tensor) -> TieGroups:
        """Groups from the scores of ranked lists.

        Args:
            list_scores: (B, L) scores, best first (equal scores adjacent).
            hits: (B, L) bool relevance of the listed items.
            straddles: (B,) bool, the last position's group continues past the list.
            tail_size, tail_relevant: (B,) items and relevant items of the row that share
                the last position's score (read only where ``straddles``).
        """
        n_rows, length = list_scores.shape
        device = list_scores.device
        new = torch.ones(n_rows, length, dtype=torch.bool, device=device)
        new[:, 1:] = list_scores[:, 1:] != list_scores[:, :-1]
        group = torch.cumsum(new, 1) - 1
        pos = torch.arange(length, device=device).expand(n_rows, length)
        start = torch.cummax(torch.where(new, pos, torch.zeros_like(pos)), 1).values
        ones = torch.ones(n_rows, length, dtype=torch.float64, device=device)
        size = torch.zeros_like(ones).scatter_add_(1, group, ones).gather(1, group)
        relevant = torch.zeros_like(ones).scatter_add_(1, group, hits.to(torch.float64)).gather(1, group)
        last = (group == group[:, -1:]) & straddles.unsqueeze(1)
        size = torch.where(last, tail_size.to(torch.float64).unsqueeze(1), size)
        relevant = torch.where(last, tail_relevant.to(torch.float64).unsqueeze(1), relevant)
        tied = torch.zeros(n_rows, length, dtype=torch.bool, device=device)
        tied[:, :-1] = ~new[:, 1:]
        tied[:, -1] = straddles
        return cls(start, size, relevant, tied)

    @property
    def any(self) -> bool:
        """Does any list hold or end inside a group of two or more items?"""
        return bool((self.size > 1).any())

    def reciprocal_rank_sums(self) -> Tensor:
        """(B, L) float64: entry p - 1 is E[MRR@p], the expected reciprocal rank of the first
        relevant item when it lies within the top p (see :func:`expected_mrr`); computed once."""
        if self._rr_sums is None:
            length = self.start.shape[1]
            has = self.relevant > 0
            first = has.to(torch.int8).argmax(1, keepdim=True)
            a = self.start.gather(1, first).to(torch.float64)
            n = self.size.gather(1, first)
            r = self.relevant.gather(1, first).clamp(min=1)
            rank = torch.arange(1, length + 1, dtype=torch.float64, device=n.device).unsqueeze(0)
            j = rank - a  # the offset inside the group of the position of that rank
            inside = (j >= 1) & (j <= n - r + 1) & has.any(1, keepdim=True)
            j = torch.where(inside, j, torch.ones_like(j))
            log_p = _log_choose(n - j, r - 1) - _log_choose(n, r)
            self._rr_sums = torch.cumsum(torch.where(inside, torch.exp(log_p) / rank, torch.zeros_like(log_p)), 1)
        return self._rr_sums

    def hits(self, mode: str) -> Tensor:
        """(B, L) float64 relevance of each position under ``optimistic`` or ``pessimistic``
        (0/1), or ``expected`` (the probability r / n of the position's group)."""
        offset = torch.arange(self.start.shape[1], device=self.start.device) - self.start
        if mode == "optimistic":
            return (offset < self.relevant).to(torch.float64)
        if mode == "pessimistic":
            return (offset >= self.size - self.relevant).to(torch.float64)
        if mode == "expected":
            return self.relevant / self.size
        raise ValueError(f"no hits rule for tie mode {mode!r}")


def _log_choose(n: Tensor, k: Tensor) -> Tensor:
    """log C(n, k) for 0 <= k <= n (float64, elementwise)."""
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def expected_hit(cum_hits: Tensor, groups: TieGroups, k: int) -> Tensor:
    """E[HitRate@k] over all orders of tied items, (B,) float64.

    A relevant item in a group wholly above the cut-off is a hit for sure; otherwise the
    group the cut-off splits (n items, r relevant, m of its positions inside the top k)
    leaves every relevant item out with probability C(n - r, m) / C(n, m).

    Args:
        cum_hits: (B, L) running sum of expected hits down the list.
        groups: the lists' tie groups.
        k: the cut-off (beyond the list's length the whole list counts).
    """
    length = groups.start.shape[1]
    cut = min(k, length) - 1
    start = groups.start[:, cut]
    above = torch.where(start > 0, cum_hits.gather(1, (start - 1).clamp(min=0).unsqueeze(1)).squeeze(1),
                        torch.zeros_like(cum_hits[:, 0]))
    n, r = groups.size[:, cut], groups.relevant[:, cut]
    m = (cut + 1 - start).to(torch.float64)
    misses = n - r
    log_none = _log_choose(misses, m.clamp(max=misses)) - _log_choose(n, m)
    p_none = torch.where(misses >= m, torch.exp(log_none), torch.zeros_like(n))
    return torch.where(above > 0.5, torch.ones_like(n), 1.0 - p_none)


def expected_mrr(groups: TieGroups, k: int) -> Tensor:
    """E[MRR@k] over all orders of tied items, (B,) float64.

    Only the first group holding a relevant item matters (start a, n items, r relevant): its
    first relevant item lands at offset j = 1 .. n - r + 1 with probability
    C(n - j, r - 1) / C(n, r), and counts 1 / (a + j) if a + j <= k. The terms are summed once
    per position for all cut-offs (:meth:`TieGroups.reciprocal_rank_sums`).
    """
    sums = groups.reciprocal_rank_sums()
    return sums[:, min(k, sums.shape[1]) - 1] if sums.shape[1] else torch.zeros_like(groups.size[:, 0])
