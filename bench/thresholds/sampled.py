"""``sampled``: the SL@K paper's Monte Carlo estimate, made safe by de-duplication."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import Scorer, prefer_full_rows
from bench.errors import ConfigError
from bench.thresholds import ESTIMATORS
from bench.thresholds.base import SampleEstimator, kth_largest, mask_duplicates


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
        pos_items, valid = self.positive_items(users)
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
