"""``cached``: each user's top-K' items from the last rebuild, rescored, merged with the sample."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.contracts import Scorer, TrainData
from bench.errors import ConfigError
from bench.thresholds.base import SampleEstimator, union_kth
from bench.thresholds.registry import ESTIMATORS


@ESTIMATORS.register("cached")
class CachedEstimator(SampleEstimator):
    """The search engines' "prefix + exact lookups" estimate (docs/thresholds.md#cached).

    Keeps each user's ``size`` best items (training items included, as beta is defined)
    from the last rebuild; an estimate rescores them exactly with the current model,
    merges them with the user's positives and the batch's negatives, de-duplicates and
    takes the K-th largest. Safe (a de-duplicated set of exactly scored items); right
    after a rebuild and K <= size it is exact, and it loosens only as the model drifts.

    Cost: a rebuild is one full-ranking pass over all users (like an evaluation), done at
    the first estimate of every ``rebuild_every``-th epoch (SL@K estimates only in its
    refresh epochs, so by default once per refresh epoch); an estimate scores
    size + |P_u| + N items per row. State: the (n_users, size) item table (a buffer).

    Args:
        size: K', items kept per user (>= K for an exact estimate after a rebuild).
        positives: "all" or "p90" (the user's positives in the merged set; see ``sampled``).
        rebuild_every: epochs between rebuilds.
        chunk: users per chunk in a rebuild (memory: chunk x |I| scores).
    """

    top: Tensor  # a buffer (checkpointed)

    safe = True

    def __init__(self, size: int = 64, positives: str = "all", rebuild_every: int = 1, chunk: int = 1024) -> None:
        super().__init__(positives)
        if size < 1 or rebuild_every < 1:
            raise ConfigError(f"cached estimator needs size >= 1 and rebuild_every >= 1, got {size}, {rebuild_every}")
        self.size, self.rebuild_every, self.chunk = int(size), int(rebuild_every), int(chunk)
        self.register_buffer("top", torch.zeros(0, 0, dtype=torch.int64))
        self.stale = True

    def bind(self, data: TrainData) -> None:
        super().bind(data)
        self.top = torch.zeros(data.n_users, min(self.size, data.n_items), dtype=torch.int64, device=self.top.device)
        self.stale = True

    def on_train_epoch_start(self, epoch: int) -> None:
        if epoch % self.rebuild_every == 0:
            self.stale = True

    @torch.no_grad()
    def rebuild(self, scorer: Scorer) -> None:
        """Each user's current top-``size`` items by a full pass over the catalogue."""
        users = torch.arange(self.top.shape[0], device=self.top.device)
        for part in users.split(self.chunk):
            self.top[part] = torch.topk(scorer.score_users(part), self.top.shape[1], dim=1).indices
        self.stale = False

    @torch.no_grad()
    def estimate(self, scorer: Scorer, users: Tensor, negatives: Tensor, k: int) -> Tensor:
        if self.train_csr is None:
            raise RuntimeError("bind() the estimator to the training data first")
        if self.stale:
            self.rebuild(scorer)
        pos_items, valid = self.positive_items(users)
        blocks = [(self.top[users], None), (pos_items, valid)]
        if negatives is not None:
            blocks.append((negatives, None))
        return union_kth(scorer, users, blocks, k)
