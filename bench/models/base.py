"""Common scoring for embedding backbones.

A backbone produces user and item embeddings ``E_U (n_users, d)`` and ``E_I (n_items, d)``;
the score of user u for item i is ``s_ui = f(e_u, e_i)`` with f the dot product or the
cosine similarity (``score`` setting; the SL family in the SL@K paper uses cosine, BPR
and LambdaLoss the dot product).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.errors import BenchError
from bench.losses.base import LossBatch

SCORES = ("dot", "cosine")

# Gathering one item row costs about as much as ~64 multiply-adds of a BLAS matmul
# (measured on CPU: 7 ns per gathered element vs 0.08 ns per MAC), so scoring N sampled
# items per user is cheaper as a full (B, I) matmul + gather once N * 64 >= I.
_GATHER_COST_IN_MACS = 64


class EmbeddingModel(nn.Module):
    """Base class: subclasses implement :meth:`embeddings`.

    ``tasks`` names the tasks (``task=...``) a backbone fits.

    Args:
        n_users, n_items: catalogue sizes.
        score: "dot" or "cosine".
    """

    tasks: tuple[str, ...] = ("cf", "linkpred")

    def __init__(self, n_users: int, n_items: int, score: str = "cosine") -> None:
        super().__init__()
        if score not in SCORES:
            raise BenchError(f"unknown model.score '{score}'; known: {', '.join(SCORES)}")
        self.n_users = n_users
        self.n_items = n_items
        self.score = score

    def embeddings(self) -> tuple[Tensor, Tensor]:
        """(n_users, d) user and (n_items, d) item embeddings, before normalisation."""
        raise NotImplementedError

    def bind(self, data) -> None:
        """Called once with the training data (:class:`~bench.losses.base.TrainData`);
        graph backbones build their adjacency here."""

    def extra_loss(self, users: Tensor, items: Tensor) -> Tensor | None:
        """A term the backbone adds to the recommendation loss (XSimGCL's contrastive
        loss), computed from the last training forward; None for most backbones."""
        return None

    def _normalise(self, x: Tensor) -> Tensor:
        return F.normalize(x, dim=-1) if self.score == "cosine" else x

    def score_items(self, users: Tensor, items: Tensor) -> Tensor:
        """Scores of M given items per user.

        Args:
            users: (B,) user ids; items: (B, M) item ids.
        Returns:
            (B, M) scores s_ui, with gradient.
        """
        user_emb, item_emb = self.embeddings()
        u = self._normalise(user_emb[users])
        n_items, m = item_emb.shape[0], items.shape[1]
        if m * _GATHER_COST_IN_MACS >= n_items:
            # normalise the table once and score everything: one matmul beats the gather
            return (u @ self._normalise(item_emb).T).gather(1, items)
        return torch.bmm(self._normalise(item_emb[items]), u.unsqueeze(-1)).squeeze(-1)

    def score_pairs(self, users: Tensor, items: Tensor, negatives: Tensor) -> tuple[Tensor, Tensor]:
        """Scores of positives and sampled negatives.

        Args:
            users: (B,) user ids; items: (B,) positive item ids; negatives: (B, N) item ids.
        Returns:
            (pos (B,), neg (B, N)) scores.
        """
        scores = self.score_items(users, torch.cat([items.unsqueeze(1), negatives], dim=1))
        return scores[:, 0], scores[:, 1:]

    def score_users(self, users: Tensor) -> Tensor:
        """(B, n_items) scores of all items for ``users`` (B,), with gradient."""
        user_emb, item_emb = self.embeddings()
        return self._normalise(user_emb[users]) @ self._normalise(item_emb).T

    def training_batch(self, rows: Tensor, sample_negatives: Callable[[Tensor], Tensor]) -> LossBatch:
        """Turn a loader batch into the loss's inputs.

        Args:
            rows: (B, 3) (user, positive item, training-pair id) from the data module.
            sample_negatives: (P,) users -> (P, N) negative items for those users.
        Returns:
            the :class:`~bench.losses.base.LossBatch` (scores with gradient).
        """
        users, items, pair_ids = rows[:, 0], rows[:, 1], rows[:, 2]
        negatives = sample_negatives(users)
        pos, neg, full_scores = self.score_batch(users, items, negatives, pair_ids)
        return LossBatch(pos=pos, neg=neg, users=users, items=items, negatives=negatives, pair_ids=pair_ids,
                         full_scores=full_scores, model=self)

    def score_batch(self, users: Tensor, items: Tensor, negatives: Tensor,
                    pair_ids: Tensor) -> tuple[Tensor, Tensor, Callable[[Tensor], Tensor]]:
        """Everything a training step needs from the backbone.

        Args:
            users, items: (B,) the pairs; negatives: (B, N); pair_ids: (B,) training-pair rows.
        Returns:
            pos (B,) and neg (B, N) scores with gradient, and ``full_scores``: batch rows
            (r,) -> (r, n_items) scores without gradient, embeddings computed on first use.
        """
        pos, neg = self.score_pairs(users, items, negatives)
        cache: dict[str, Callable[[Tensor], Tensor]] = {}

        def full_scores(rows: Tensor) -> Tensor:
            if "scorer" not in cache:
                cache["scorer"] = self.full_scorer()
            return cache["scorer"](users[rows])

        return pos, neg, full_scores

    @torch.no_grad()
    def full_scorer(self, stage: str = "valid") -> Callable[[Tensor], Tensor]:
        """A function users (B,) -> (B, n_items) scores, for evaluation.

        The embeddings (a propagation for graph backbones) and their normalisation are
        computed once here, not once per chunk of users. ``stage`` ("valid" or "test")
        matters to backbones whose user state depends on the history seen (SASRec).
        """
        user_emb, item_emb = self.embeddings()
        users_n, items_t = self._normalise(user_emb), self._normalise(item_emb).T.contiguous()
        return lambda users: users_n[users] @ items_t
