"""The loss interface.

Every loss sees one training batch of B (user, positive item) pairs with N sampled
negatives each, as a :class:`LossBatch`, and returns a scalar averaged over the pairs.
Losses that need more than the sampled scores (per-user state, exact ranks) get the
user ids and a callable that scores a user's whole catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from torch import Tensor, nn

from bench.datasets.base import CSR
from bench.errors import ConfigError

if TYPE_CHECKING:
    from bench.models.base import EmbeddingModel


@dataclass
class LossBatch:
    """Inputs of a loss for one batch.

    Attributes:
        pos: (B,) scores s_ui of the positive items.
        neg: (B, N) scores s_uj of the sampled negatives.
        users: (B,) user ids (for per-user state).
        items: (B,) positive item ids.
        negatives: (B, N) negative item ids.
        pair_ids: (B,) index of each (u, i) pair among the training pairs (for per-pair
            state such as SONG's moving averages).
        full_scores: optional callable, (r,) row indices of this batch -> (r, n_items)
            scores of every item for those rows' queries under the current model, without
            gradient (for exact ranks); embeddings are computed once per step.
        model: the backbone that scored the batch (for threshold estimators inside a loss).
    """

    pos: Tensor
    neg: Tensor
    users: Optional[Tensor] = None
    items: Optional[Tensor] = None
    negatives: Optional[Tensor] = None
    pair_ids: Optional[Tensor] = None
    full_scores: Optional[Callable[[Tensor], Tensor]] = None
    model: Optional[Any] = None


@dataclass
class TrainData:
    """What a loss may know about the training data (given once, before training).

    Attributes:
        n_users, n_items: catalogue sizes.
        train: training positives per user (CSR).
        n_pairs: number of training (u, i) pairs; ``LossBatch.pair_ids`` index them.
        node_features: (n_users, f) features of the query nodes (link prediction), or None.
        sequences: time-ordered histories (:class:`~bench.datasets.sequences.Sequences`,
            sequential recommendation), or None.
    """

    n_users: int
    n_items: int
    train: CSR
    n_pairs: int
    node_features: Optional[Tensor] = None
    sequences: Optional[Any] = None


class RecLoss(nn.Module):
    """Base class of registered losses.

    Args:
        n_negatives: negatives sampled per (u, i) pair for this loss.

    Attributes:
        synced_state: ``{buffer name: LossBatch field}`` for per-user/per-pair state that a
            training step writes at the rows given by that field (``{"beta": "users"}``);
            under DDP those rows are shared with every rank after each step.
    """

    synced_state: dict[str, str] = {}

    def __init__(self, n_negatives: int = 1000) -> None:
        super().__init__()
        if n_negatives < 1:
            raise ConfigError(f"loss.n_negatives must be >= 1, got {n_negatives}")
        self.n_negatives = int(n_negatives)

    def forward(self, batch: LossBatch) -> Tensor:  # pragma: no cover - interface
        """Scalar loss, averaged over the B pairs of the batch."""
        raise NotImplementedError

    # hooks, all optional -------------------------------------------------------------
    def bind(self, data: TrainData) -> None:
        """Called once before training. Allocate per-user or per-pair state here, as
        buffers (``register_buffer``) so that checkpoints save and restore it."""

    def on_train_epoch_start(self, epoch: int) -> None:
        """Called at the start of every training epoch (0-based)."""

    def after_step(self, batch: LossBatch, model: "EmbeddingModel") -> None:
        """Called after each optimiser step, with the updated model (e.g. to refresh a
        per-user threshold as the SL@K reference code does)."""

    def diagnostics(self, model: "EmbeddingModel") -> dict[str, float]:
        """Values logged at every validation (prefixed ``diag/``); none by default."""
        return {}
