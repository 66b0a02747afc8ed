"""The loss interface.

Every loss sees one training batch of P (user, positive item) pairs with N sampled
negatives each, as a :class:`~bench.contracts.LossBatch`, and returns a scalar averaged
over the pairs. Losses that need more than the sampled scores (per-user state, exact
ranks, a threshold estimate) use the batch's ``users``, ``full_scores`` and ``scorer``.
"""

from __future__ import annotations

from torch import Tensor, nn

from bench.contracts import LossBatch, Scorer, SyncedRows, TrainData
from bench.errors import ConfigError


class RecLoss(nn.Module):
    """Base class of registered losses.

    Args:
        n_negatives: negatives sampled per (u, i) pair for this loss.
    """

    def __init__(self, n_negatives: int = 1000) -> None:
        super().__init__()
        if n_negatives < 1:
            raise ConfigError(f"loss.n_negatives must be >= 1, got {n_negatives}")
        self.n_negatives = int(n_negatives)

    def forward(self, batch: LossBatch) -> Tensor:  # pragma: no cover - interface
        """Scalar loss, averaged over the P pairs of the batch."""
        raise NotImplementedError

    # hooks, all optional -------------------------------------------------------------
    def bind(self, data: TrainData) -> None:
        """Called once before training. Allocate per-user or per-pair state here, as
        buffers (``register_buffer``) so that checkpoints save and restore it."""

    def on_train_epoch_start(self, epoch: int) -> None:
        """Called at the start of every training epoch (0-based)."""

    def after_step(self, batch: LossBatch) -> None:
        """Called after each optimiser step with the step's batch; ``batch.scorer`` now
        scores with the updated weights (e.g. to refresh a per-user threshold as the
        SL@K reference code does)."""

    def synced_rows(self, batch: LossBatch) -> SyncedRows:
        """(buffer, rows) pairs of per-user or per-pair state that this step wrote (in
        ``forward`` or ``after_step``); under data-parallel training those rows are shared
        with every rank after each step. None by default."""
        return []

    def diagnostics(self, scorer: Scorer) -> dict[str, float]:
        """Values logged at every validation (prefixed ``diag/``); none by default."""
        return {}
