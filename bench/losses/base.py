"""The loss interface.

Every loss sees one training batch of B (user, positive item) pairs with N sampled
negatives each, as a :class:`LossBatch`, and returns a scalar averaged over the pairs.
Losses that need more than the sampled scores (per-user state, exact ranks) get the
user ids and a callable that scores a user's whole catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from torch import Tensor, nn

from bench.errors import ConfigError


@dataclass
class LossBatch:
    """Inputs of a loss for one batch.

    Attributes:
        pos: (B,) scores s_ui of the positive items.
        neg: (B, N) scores s_uj of the sampled negatives.
        users: (B,) user ids (for per-user state).
        items: (B,) positive item ids.
        negatives: (B, N) negative item ids.
        score_users: optional callable, (b,) user ids -> (b, n_items) scores with
            gradient, for losses that need a user's full score row.
    """

    pos: Tensor
    neg: Tensor
    users: Optional[Tensor] = None
    items: Optional[Tensor] = None
    negatives: Optional[Tensor] = None
    score_users: Optional[Callable[[Tensor], Tensor]] = None


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
        """Scalar loss, averaged over the B pairs of the batch."""
        raise NotImplementedError
