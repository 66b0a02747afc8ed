"""``exact``: the true K-th largest score from the full score row (docs/thresholds.md#exact)."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import Scorer
from bench.thresholds.base import ThresholdEstimator, kth_largest
from bench.thresholds.registry import ESTIMATORS


@ESTIMATORS.register("exact")
class ExactEstimator(ThresholdEstimator):
    """beta_u^K over the whole catalogue (training positives included), by top-K of the
    user's full score row. Exact, hence safe. Cost: |I| scores per user. State: none.

    Args:
        chunk: users scored at once (memory: chunk x |I| floats).
    """

    safe = True

    def __init__(self, chunk: int = 1024) -> None:
        super().__init__()
        self.chunk = chunk

    @torch.no_grad()
    def estimate(self, scorer: Scorer, users: Tensor, negatives: Tensor | None, k: int) -> Tensor:
        return torch.cat([kth_largest(scorer.score_users(part), k) for part in users.split(self.chunk)])
