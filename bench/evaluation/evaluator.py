"""Chunked full-ranking evaluation over all items."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from bench.datasets.base import CSR
from bench.errors import TrainingDiverged
from bench.evaluation.metrics import DEFAULT_KS, metrics_from_hits, rank_items

log = logging.getLogger(__name__)


class FullRankingEvaluator:
    """Ranks every item for every evaluated user; nothing is sampled.

    Items in ``exclude`` (training items; at test time validation items too) are set to
    -inf before ranking. Only users with at least one ``target`` item are evaluated;
    the others are counted in ``n_skipped`` and left out of every average.

    Users are processed in chunks of at most ``max_scores // n_items`` rows, so peak
    memory is O(max_scores) whatever the number of users.

    Args:
        target: held-out items per user (the relevant set R_u).
        exclude: item sets masked with -inf.
        ks: cut-offs.
        max_scores: score-matrix entries per chunk (float32: 4 bytes each).
    """

    def __init__(self, target: CSR, exclude: Sequence[CSR], ks: Sequence[int] = DEFAULT_KS,
                 max_scores: int = 1 << 24) -> None:
        self.target = target
        self.exclude = list(exclude)
        self.ks = tuple(sorted(int(k) for k in ks))
        self.n_items = target.n_items
        self.users = (target.degrees() > 0).nonzero().squeeze(1)
        self.n_skipped = target.n_users - self.users.numel()
        self.chunk_size = max(1, int(max_scores) // max(self.n_items, 1))
        self._target_keys: dict[str, Tensor] = {}

    def user_chunks(self, rank: int = 0, world: int = 1) -> list[Tensor]:
        """The evaluated user ids, split into chunks; with ``world`` > 1, rank ``rank``'s
        share (every ``world``-th user, so shares differ by at most one user)."""
        return list(self.users[rank::world].split(self.chunk_size))

    @torch.no_grad()
    def evaluate_chunk(self, score_users: Callable[[Tensor], Tensor], users: Tensor) -> dict[str, Tensor]:
        """Per-user metrics for one chunk.

        Args:
            score_users: (b,) user ids -> (b, n_items) scores.
            users: (b,) user ids, each with at least one target item.
        Returns:
            ``{"ndcg@20": (b,) float64, ...}``.
        """
        target = self.target.on(users.device)
        scores = score_users(users).float()
        flat = scores.view(-1)
        for csr in self.exclude:
            rows, items = csr.on(users.device).gather_rows(users)
            flat.index_fill_(0, rows * self.n_items + items, float("-inf"))
        top = rank_items(scores, max(self.ks))
        # topk ranks NaN above every number, so a NaN anywhere in a row shows at rank 1
        if torch.isnan(scores.gather(1, top[:, :1])).any():
            raise TrainingDiverged("the model produced NaN scores; lower the learning rate or check the loss")
        return metrics_from_hits(self._hits(target, users, top), target.degrees()[users], self.ks)

    def _hits(self, target: CSR, users: Tensor, top: Tensor) -> Tensor:
        """(b, L) bool: is top[r, j] one of users[r]'s target items? A key search in the
        sorted (user * n_items + item) keys of the target set: O(b L log nnz), no (b, I) matrix."""
        keys = self._target_keys.get(str(users.device))
        if keys is None:
            keys = (target.row_ids() * self.n_items + target.indices).contiguous()  # sorted: CSR order
            self._target_keys[str(users.device)] = keys
        query = users[:, None] * self.n_items + top
        pos = torch.searchsorted(keys, query).clamp_(max=max(keys.numel() - 1, 0))
        return keys[pos] == query if keys.numel() else torch.zeros_like(query, dtype=torch.bool)

    def evaluate(self, score_users: Callable[[Tensor], Tensor],
                 device: torch.device | str = "cpu") -> dict[str, Tensor]:
        """Per-user metrics for all evaluated users (see :meth:`evaluate_chunk`)."""
        parts = [self.evaluate_chunk(score_users, chunk.to(device)) for chunk in self.user_chunks()]
        return {k: torch.cat([p[k] for p in parts]).cpu() for k in parts[0]} if parts else {}


def mean_metrics(per_user: dict[str, Tensor]) -> dict[str, float]:
    """Average per-user metric vectors into floats."""
    return {k: float(v.mean()) for k, v in per_user.items()}
