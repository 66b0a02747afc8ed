"""The loss interface.

Every loss sees one training batch of P (user, positive item) pairs with N sampled
negatives each, as a :class:`~bench.contracts.LossBatch`, and returns a scalar averaged
over the pairs. Losses that need more than the sampled scores (per-user state, exact
ranks, a threshold estimate) use the batch's ``users``, ``full_scores`` and ``scorer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from bench.contracts import LossBatch, Scorer, SyncedRows, TrainData
from bench.errors import ConfigError


def positive(key: str, value: float) -> float:
    """``value`` as a float, or a one-line error naming ``key`` when it is not > 0."""
    if not value > 0:
        raise ConfigError(f"{key} must be > 0, got {value}")
    return float(value)


def logsumexp_negatives(x: Tensor, valid: Tensor | None) -> Tensor:
    """(P,) log-sum-exp of each row of ``x`` (P, M) over its valid columns.

    Masked columns must already hold -inf (shared negatives do); a row with no valid column
    (every drawn item is one of its positives) gives 0 and no gradient instead of -inf/NaN.
    """
    out = torch.logsumexp(x, dim=1)
    if valid is None:
        return out
    # a row is empty exactly when its log-sum-exp is -inf (masked columns hold -inf, scores are
    # finite): read off the (P,) result instead of a pass over the (P, M) mask
    empty = torch.isneginf(out)
    if not bool(empty.any()):
        return out
    return torch.logsumexp(x.masked_fill(empty[:, None], 0.0), dim=1).masked_fill(empty, 0.0)


def mean_over_negatives(x: Tensor, valid: Tensor | None) -> Tensor:
    """Scalar mean of ``x`` (P, N) over the valid (row, negative) entries; all of them when
    ``valid`` is None."""
    if valid is None:
        return x.mean()
    return torch.where(valid, x, torch.zeros_like(x)).sum() / valid.sum().clamp(min=1)


def row_mean(x: Tensor, valid: Tensor | None) -> Tensor:
    """(P,) mean of each row of ``x`` (P, M) over its valid columns (all when ``valid`` is None)."""
    if valid is None:
        return x.mean(1)
    return torch.where(valid, x, torch.zeros_like(x)).sum(1) / valid.sum(1).clamp(min=1)


class RecLoss(nn.Module):
    """Base class of registered losses.

    Args:
        n_negatives: negatives sampled per (u, i) pair for this loss.

    Attributes:
        shares_negatives: with ``train.negatives=shared``, whether the loss takes the batch's
            one shared draw (scores ``neg`` (P, N) with ``batch.neg_valid`` marking each row's
            own positives, scored -inf); False keeps per-pair negatives (a loss with one
            negative per pair, such as BPR, would otherwise give every row the same one).
        trains_backbone: whether this step trains the backbone; False (AdvInfoNCE's adversarial
            epochs) also leaves out the backbone's own extra term (XSimGCL's contrastive loss),
            so that the backbone gets no gradient at all.
        uses_log_q: whether the loss reads the sampler's probabilities (``batch.pos_log_q``,
            ``batch.neg_log_q``: a logQ correction); computed for such losses only.
        alternates_players: whether some parameters get no gradient in some epochs (a min-max
            loss that trains its players in turns); plain DDP refuses that, so such a loss
            needs ``trainer.strategy=ddp_find_unused_parameters_true``.
    """

    shares_negatives: bool = True
    trains_backbone: bool = True
    uses_log_q: bool = False
    alternates_players: bool = False

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

    def optimizer_groups(self, defaults: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Extra optimiser parameter groups for parameters of this loss that need their own
        options (a learning rate, ``maximize=True`` for the max player of a min-max loss).

        Args:
            defaults: the optimiser's default options (``lr``, ``weight_decay``, ...), e.g. to
                scale the learning rate.
        Returns:
            torch parameter groups, ``{"params": [...], **options}``; options left out take the
            defaults. Parameters of the loss in no group train with the backbone at the
            defaults. Empty by default (one group for everything).
        """
        return []

    def diagnostics(self, scorer: Scorer) -> dict[str, float]:
        """Values logged at every validation (prefixed ``diag/``); none by default."""
        return {}

    # learning to rank --------------------------------------------------------------------
    def list_loss(self, scores: Tensor, labels: Tensor, mask: Tensor,
                  generator: torch.Generator | None = None) -> Tensor:
        """``task=ltr``: the scalar loss of B padded candidate lists with graded labels.

        Losses that rank lists override this (:func:`has_list_form`); the others have no
        learning-to-rank form and ``task=ltr`` refuses them.

        Args:
            scores: (B, L) scores, with gradient; padding may hold anything.
            labels: (B, L) integer relevance grades >= 0.
            mask: (B, L) bool, True for the real documents of each list.
            generator: randomness a loss may need (ListMLE's order of tied labels), seeded
                per step by the caller.
        Returns:
            scalar: the mean over the lists that have something to learn (documents of at
            least two grades); 0 when none has.
        """
        raise NotImplementedError(f"{type(self).__name__} has no learning-to-rank form")


def has_list_form(loss: RecLoss | type) -> bool:
    """Whether a loss (instance or class) implements :meth:`RecLoss.list_loss` (``task=ltr``)."""
    cls = loss if isinstance(loss, type) else type(loss)
    return getattr(cls, "list_loss", RecLoss.list_loss) is not RecLoss.list_loss


def list_mean(loss: Tensor, counted: Tensor) -> Tensor:
    """Scalar mean of the (B,) per-list ``loss`` over the ``counted`` lists (0 when none is)."""
    return torch.where(counted, loss, torch.zeros_like(loss)).sum() / counted.sum().clamp(min=1)
