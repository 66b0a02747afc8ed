"""``stratified``: a Horvitz-Thompson rescaled order statistic (tight, not safe)."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import Scorer
from bench.thresholds.base import SampleEstimator
from bench.thresholds.registry import ESTIMATORS


def weighted_kth(scores: Tensor, weights: Tensor, k: int) -> Tensor:
    """Per row, the largest t whose weighted count of scores >= t reaches k.

    Args:
        scores: (B, M), absent entries -inf (give them weight 0).
        weights: (B, M) non-negative.
        k: the rank K.
    Returns:
        (B,) thresholds; -inf where the total weight is below k.
    """
    order = torch.argsort(scores, dim=1, descending=True)
    s = scores.gather(1, order)
    cum = weights.gather(1, order).cumsum(1)
    idx = torch.searchsorted(cum, torch.full((scores.shape[0], 1), float(k), dtype=cum.dtype,
                                             device=cum.device) - 1e-9).squeeze(1)
    out = torch.full((scores.shape[0],), float("-inf"), dtype=scores.dtype, device=scores.device)
    ok = idx < scores.shape[1]
    out[ok] = s[ok, idx[ok]]
    return out


@ESTIMATORS.register("stratified")
class StratifiedEstimator(SampleEstimator):
    """Positives count once; each sampled negative stands for (|I| - |P_u|) / N of the
    user's negatives (its inverse inclusion rate); the estimate is the largest t whose
    weighted count of scores >= t reaches K (docs/thresholds.md#stratified).

    Roughly unbiased in effective rank, so it overestimates about half the time: **not
    safe**. Cost: |P_u| + N scores and a sort per row. State: none.
    """

    safe = False

    @torch.no_grad()
    def estimate(self, scorer: Scorer, users: Tensor, negatives: Tensor, k: int) -> Tensor:
        pos_items, valid = self.positive_items(users)
        n_pos = valid.sum(1, keepdim=True).to(torch.float64)
        scores = scorer.score_items(users, torch.cat([pos_items, negatives], 1)).double()
        scores[:, : pos_items.shape[1]].masked_fill_(~valid, float("-inf"))
        w_neg = ((self.n_items - n_pos) / negatives.shape[1]).expand(-1, negatives.shape[1])
        weights = torch.cat([valid.double(), w_neg], 1)
        return weighted_kth(scores, weights, k).to(torch.get_default_dtype())
