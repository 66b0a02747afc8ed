"""``quantile``: a learned per-user threshold, pinball regression toward the top-K quantile."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import LossBatch, Scorer, SyncedRows, TrainData
from bench.thresholds.base import SampleEstimator, kth_largest, mask_duplicates
from bench.thresholds.registry import ESTIMATORS


@ESTIMATORS.register("quantile")
class QuantileEstimator(SampleEstimator):
    r"""lambda_u follows the (1 - K/|I|)-quantile of u's scores by stochastic pinball steps
    (docs/thresholds.md#quantile; the form of SONG@K's lambda update):
    :math:`\lambda_u \leftarrow \lambda_u + \eta\,\mathrm{clip}(\hat F_u(\lambda_u)\,|I|/K - 1, -1, 1)`,
    where :math:`\hat F_u(\lambda) = (\#\{i \in P_u: s_{ui} \ge \lambda\} + w_u \#\{j \in N: s_{uj} \ge \lambda\})/|I|`
    is the Horvitz-Thompson share of items at or above lambda (w_u = (|I| - |P_u|)/N).
    The step is normalised by K/|I| so that it moves in score units whatever the
    catalogue size. A user's first estimate starts from the safe de-duplicated sample
    estimate. **Not safe**. Cost: |P_u| + N scores per row. State: lambda (n_users,), a buffer.

    Args:
        lr: eta, in score units per estimate.
        steps: pinball steps per estimate (on the same sample).
        positives: "all" or "p90" (see ``sampled``).
    """

    lam: Tensor  # a buffer (checkpointed)

    safe = False

    def __init__(self, lr: float = 0.02, steps: int = 5, positives: str = "all") -> None:
        super().__init__(positives)
        self.lr, self.steps = float(lr), int(steps)
        self.register_buffer("lam", torch.zeros(0))

    def bind(self, data: TrainData) -> None:
        super().bind(data)
        self.lam = torch.full((data.n_users,), float("nan"), device=self.lam.device)

    def synced_rows(self, batch: LossBatch) -> SyncedRows:
        return [(self.lam, batch.require("users"))]

    @torch.no_grad()
    def estimate(self, scorer: Scorer, users: Tensor, negatives: Tensor, k: int) -> Tensor:
        pos_items, valid = self.positive_items(users)
        scores = scorer.score_items(users, torch.cat([pos_items, negatives], 1)).float()
        n_p = pos_items.shape[1]
        pos = scores[:, :n_p].masked_fill(~valid, float("-inf"))
        neg = scores[:, n_p:]
        w = (self.n_items - valid.sum(1, keepdim=True)).float() / neg.shape[1]
        # rows of a repeated user share one state: take the first row's value for all
        uniq, inverse = torch.unique(users, return_inverse=True)
        first = torch.full_like(uniq, users.numel()).scatter_reduce(
            0, inverse, torch.arange(users.numel(), device=users.device), reduce="amin")
        lam = self.lam[uniq].clone()
        fresh = torch.isnan(lam)
        if fresh.any():
            start = kth_largest(torch.cat([pos, mask_duplicates(negatives, neg)], 1), k)[first]
            lam[fresh] = start[fresh]
        p, n, ww = pos[first], neg[first], w[first]
        for _ in range(self.steps):
            share = ((p >= lam[:, None]).sum(1) + ww.squeeze(1) * (n >= lam[:, None]).sum(1)) / self.n_items
            lam = lam + self.lr * (share * self.n_items / k - 1).clamp(-1, 1)
        self.lam[uniq] = torch.where(torch.isfinite(lam), lam, torch.full_like(lam, float("nan")))  # restart later
        return torch.nan_to_num(lam, nan=float("-inf"))[inverse]
