"""``sampled``: the SL@K paper's Monte Carlo estimate, made safe by de-duplication."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from bench.errors import ConfigError
from bench.thresholds import ESTIMATORS
from bench.thresholds.base import ThresholdEstimator, kth_largest, mask_duplicates


@ESTIMATORS.register("sampled")
class SampledEstimator(ThresholdEstimator):
    """K-th largest score among the user's training positives and the batch's negatives.

    Safe when ``dedup`` is on (any de-duplicated item subset's K-th largest is <= the
    catalogue's); heavily biased low (rank ~ K * |I| / (|P_u| + N)). Cost: scoring
    |P_u| + N items per row. State: none.

    Args:
        positives: "p90" caps each user's positives at the 90th percentile of users'
            positive counts (the reference code's padding cap, lowest item ids first);
            "all" uses every positive (tighter, same safety).
        dedup: drop repeated negatives (False reproduces the reference code, which can
            overestimate when sampling with replacement).
    """

    safe = True

    def __init__(self, positives: str = "p90", dedup: bool = True) -> None:
        if positives not in ("p90", "all"):
            raise ConfigError(f"unknown estimator positives '{positives}'; use p90 or all")
        self.positives = positives
        self.dedup = dedup
        self.safe = dedup
        self.train = None
        self.cap = None

    def bind(self, data) -> None:
        self.train = data.train
        if self.positives == "p90":
            self.cap = max(1, int(np.percentile(data.train.degrees().numpy(), 90)))
        self._device_train = {}

    def _train_on(self, device: torch.device):
        key = str(device)
        if key not in self._device_train:
            self._device_train[key] = self.train.to(device)
        return self._device_train[key]

    @torch.no_grad()
    def estimate(self, model, users: Tensor, negatives: Tensor, k: int) -> Tensor:
        if self.train is None:
            raise RuntimeError("bind() the estimator to the training data first")
        pos_items, valid = self._train_on(users.device).padded_rows(users, self.cap)
        items = torch.cat([pos_items, negatives], dim=1)
        scores = model.score_items(users, items)
        scores[:, : pos_items.shape[1]].masked_fill_(~valid, float("-inf"))
        if self.dedup:
            # positives never repeat and are never negatives (the sampler excludes them)
            scores = mask_duplicates(items, scores)
        return kth_largest(scores, k)
