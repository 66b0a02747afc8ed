"""``sampled``: the SL@K paper's Monte Carlo estimate, made safe by de-duplication."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import GATHER_COST_IN_MACS, Scorer, draws_per_row, group_layout, prefer_full_rows
from bench.errors import ConfigError
from bench.thresholds.base import SampleEstimator, kth_largest, mask_duplicates
from bench.thresholds.registry import ESTIMATORS


@ESTIMATORS.register("sampled")
class SampledEstimator(SampleEstimator):
    """K-th largest score among the user's training positives and the batch's negatives
    (docs/thresholds.md#sampled).

    Safe when ``dedup`` is on (any de-duplicated item subset's K-th largest is <= the
    catalogue's); heavily biased low (rank ~ K * |I| / (|P_u| + N)). Cost: scoring
    |P_u| + N items per row. State: none.

    Args:
        positives: "p90" caps each user's positives at the 90th percentile of users'
            positive counts (the reference code's padding cap, lowest item ids first; the
            default); "all" uses every positive (tighter, same safety).
        dedup: drop repeated negatives (False reproduces the reference code, which can
            overestimate when sampling with replacement).
        path: "dense" scores full rows and masks them to the sampled set; "sparse" scores
            the sampled items and drops repeats by sorting; "auto" picks by cost (same
            result either way).
    """

    safe = True

    def __init__(self, positives: str = "p90", dedup: bool = True, path: str = "auto") -> None:
        super().__init__(positives)
        if path not in ("auto", "dense", "sparse"):
            raise ConfigError(f"unknown estimator path '{path}'; use auto, dense or sparse")
        self.path = path
        self.dedup = dedup
        self.safe = dedup

    @torch.no_grad()
    def estimate(self, scorer: Scorer, users: Tensor, negatives: Tensor, k: int) -> Tensor:
        return self._estimate(scorer, users, *self.positive_items(users), negatives, k)

    def _estimate(self, scorer: Scorer, users: Tensor, pos_items: Tensor, valid: Tensor, negatives: Tensor,
                  k: int) -> Tensor:
        """:meth:`estimate` given the rows' capped positives (B, L) and their ``valid`` mask."""
        items = torch.cat([pos_items, negatives], dim=1)
        dense = self.path == "dense" or (self.path == "auto" and prefer_full_rows(items.shape[1], scorer.n_items))
        if self.dedup and dense:
            # many samples per row: score the full rows once and keep the sampled set as a
            # membership mask; a set has no duplicates, and no (B, P+N) sort is needed
            rows = torch.arange(users.numel(), device=users.device)
            member = torch.zeros(users.numel(), scorer.n_items, dtype=torch.bool, device=users.device)
            member[rows[:, None].expand_as(negatives), negatives] = True
            member[rows[:, None].expand_as(pos_items)[valid], pos_items[valid]] = True
            scores = scorer.score_users(users).masked_fill(~member, float("-inf"))
            return kth_largest(scores, k)
        scores = scorer.score_items(users, items)
        scores[:, : pos_items.shape[1]].masked_fill_(~valid, float("-inf"))
        if self.dedup:
            # padding slots get distinct negative ids, so they never hide a real item
            pad_ids = -1 - torch.arange(pos_items.shape[1], device=users.device).expand_as(pos_items)
            ids = torch.cat([torch.where(valid, pos_items, pad_ids), negatives], dim=1)
            scores = mask_duplicates(ids, scores)
        return kth_largest(scores, k)

    @torch.no_grad()
    def estimate_shared(self, scorer: Scorer, users: Tensor, draws: Tensor, k: int) -> Tensor:
        """:meth:`estimate` over the same item sets (each row's capped positives and its group's
        draw, every item once), with each draw scored once per group by a matmul
        (:meth:`~bench.contracts.Scorer.score_groups`, one encoding of the users for positives and
        draws) instead of a (B, P + N, d) gather and a (B, P + N) sort; the dense path and
        ``dedup=False`` take :meth:`estimate`'s path, with the positives gathered once.

        Args:
            draws: (G, N) item ids, one draw per group of consecutive rows.
        """
        pos_items, valid = self.positive_items(users)
        b, (n_groups, n) = users.numel(), draws.shape
        # gathered item rows (each positive, each draw once) against one full (B, I) matmul
        gathered = (b * pos_items.shape[1] + n_groups * n) * GATHER_COST_IN_MACS + b * n
        if self.path == "dense" or (self.path == "auto" and gathered >= b * scorer.n_items) or not self.dedup:
            return self._estimate(scorer, users, pos_items, valid, draws_per_row(draws, b), k)
        pos_scores, drawn = scorer.score_groups(users, pos_items, draws)
        pos_scores = pos_scores.masked_fill(~valid, float("-inf"))
        # a repeated draw item counts once (its first occurrence): a stable sort per group
        ordered, order = torch.sort(draws, dim=1, stable=True)
        repeat = torch.zeros_like(draws, dtype=torch.bool)
        repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
        first = torch.empty_like(repeat).scatter_(1, order, ~repeat)
        size, _ = group_layout(b, n_groups)
        group = torch.arange(b, device=users.device) // size
        keep = first[group]
        # a draw item that is one of the row's listed positives is already counted there:
        # look each positive up in its group's sorted draw (the first match is the kept copy)
        at = torch.searchsorted(ordered[group], pos_items).clamp(max=n - 1)
        listed = valid & (ordered[group[:, None], at] == pos_items)
        rows = torch.arange(b, device=users.device)[:, None].expand_as(at)
        keep[rows[listed], order[group[:, None], at][listed]] = False
        return kth_largest(torch.cat([pos_scores, drawn.masked_fill(~keep, float("-inf"))], dim=1), k)
