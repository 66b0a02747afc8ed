"""What backbones, losses and threshold estimators agree on.

This module sits below ``bench.models``, ``bench.losses`` and ``bench.thresholds``: each of
them imports it and none imports another for these types.

- :class:`TrainData`: what a backbone, a loss or an estimator may know about the training
  data; built once by the task, complete, then frozen.
- :class:`Scorer`: what a loss or an estimator may ask of a backbone (scores of given
  items, full score rows).
- :class:`Queries`: a loader batch encoded by the backbone (one query vector per training
  pair) and the single place that decides how candidate items are scored.
- :class:`LossBatch`: the inputs of a loss for one training step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.datasets.base import CSR

if TYPE_CHECKING:
    from bench.datasets.sequences import Sequences

# Gathering one item row costs about as much as ~64 multiply-adds of a BLAS matmul
# (measured on CPU: 7 ns per gathered element vs 0.08 ns per MAC), so scoring M items
# per query is cheaper as a full (B, I) matmul + gather once M * 64 >= I.
GATHER_COST_IN_MACS = 64


def take_rows(table: Tensor, ids: Tensor) -> Tensor:
    """``table[ids]`` for a (n, d) table and integer ids of any shape: (*ids.shape, d).

    ``index_select`` copies whole rows; on CPU it is 4-5x faster than advanced indexing's
    element-wise gather (17,024 rows of a (40,988, 64) table: 1.8 vs 7.4 ms), and its backward
    (``index_add_``) accumulates in the same order, so the numbers are the same."""
    return table.index_select(0, ids.reshape(-1)).view(*ids.shape, table.shape[-1])


def prefer_full_rows(n_candidates: int, n_items: int) -> bool:
    """True when scoring ``n_candidates`` items per query costs more by gathering their
    rows than by scoring the whole catalogue with one matmul (then selecting)."""
    return n_candidates * GATHER_COST_IN_MACS >= n_items


def group_layout(n_rows: int, groups: int) -> tuple[int, int]:
    """(rows per group, number of groups) when ``n_rows`` rows are split into at most ``groups``
    groups of consecutive rows, all but the last of the same size ceil(n_rows / groups)."""
    size = -(-n_rows // groups)
    return size, -(-n_rows // size)


def draws_per_row(draws: Tensor, n_rows: int) -> Tensor:
    """(n_rows, M) item ids of each row's shared draw: ``draws`` (M,) for the whole batch (an
    expanded view, no copy) or (G, M), one per group of consecutive rows (:func:`group_layout`)."""
    if draws.dim() == 1:
        return draws.expand(n_rows, -1)
    size, _ = group_layout(n_rows, draws.shape[0])
    return draws.repeat_interleave(size, 0)[:n_rows]


def grouped_scores(vectors: Tensor, drawn: Tensor) -> Tensor:
    """(P, M) scores of each query against its group's M item rows.

    Args:
        vectors: (P, d) query vectors; row r is in group r // ceil(P / G).
        drawn: (G, M, d) item rows of each group's draw (normalised when scores are cosine).
    Returns:
        (P, M): one batched (s, d) x (d, M) matmul per group, no per-row gather.
    """
    n_groups = drawn.shape[0]
    p, dim = vectors.shape
    size, _ = group_layout(p, n_groups)
    padded = F.pad(vectors, (0, 0, 0, n_groups * size - p)).view(n_groups, size, dim)
    return torch.bmm(padded, drawn.transpose(1, 2)).reshape(-1, drawn.shape[1])[:p]


def score_candidates(queries: Tensor, item_emb: Tensor, items: Tensor, cosine: bool) -> Tensor:
    """Scores of M candidate items per query.

    Args:
        queries: (B, d) query vectors, already normalised when ``cosine``.
        item_emb: (I, d) item embeddings, not normalised.
        items: (B, M) item ids.
        cosine: normalise item vectors (cosine scores) or not (dot products).
    Returns:
        (B, M) scores, with gradient to both tables.
    """
    if prefer_full_rows(items.shape[1], item_emb.shape[0]):
        # normalise the table once and score everything: one matmul beats the gather
        table = F.normalize(item_emb, dim=-1) if cosine else item_emb
        return (queries @ table.T).gather(1, items)
    rows = take_rows(item_emb, items)
    rows = F.normalize(rows, dim=-1) if cosine else rows
    return torch.bmm(rows, queries.unsqueeze(-1)).squeeze(-1)


@dataclass(frozen=True)
class TrainData:
    """What a backbone, loss or estimator may know about the training data (given once,
    before training, by :meth:`bind`).

    Attributes:
        n_users, n_items: catalogue sizes (queries are users or nodes).
        train: training positives per user (CSR).
        n_pairs: number of training pairs; ``LossBatch.pair_ids`` index ``[0, n_pairs)``
            (for per-pair state such as SONG@K's moving averages).
        node_features: (n_users, f) features of the query nodes (link prediction), or None.
        sequences: time-ordered histories (sequential recommendation), or None.
    """

    n_users: int
    n_items: int
    train: CSR
    n_pairs: int
    node_features: Tensor | None = None
    sequences: Sequences | None = None


@runtime_checkable
class Scorer(Protocol):
    """What losses and estimators may ask of a backbone.

    ``users`` are query ids (users, or nodes in link prediction); a sequential backbone
    answers for each user's state after its whole training history.
    """

    n_users: int
    n_items: int

    def score_items(self, users: Tensor, items: Tensor) -> Tensor:
        """(B,) users, (B, M) item ids -> (B, M) scores (with gradient when enabled)."""
        ...

    def score_users(self, users: Tensor) -> Tensor:
        """(B,) users -> (B, n_items) scores of every item."""
        ...

    def score_groups(self, users: Tensor, items: Tensor, draws: Tensor) -> tuple[Tensor, Tensor]:
        """(B,) users, (B, L) item ids of each row, (G, M) item ids of each group's draw ->
        (B, L) scores of the row's own items and (B, M) scores of its group's draw (row r in
        group r // ceil(B / G), :func:`draws_per_row`): :meth:`score_items` of the row's items
        and of the expanded draw, but with one encoding of the users (one propagation of a
        graph backbone) and no item row gathered per user for the draws."""
        ...


@dataclass(frozen=True, eq=False)
class Queries:
    """A loader batch as the backbone encodes it: one query vector per training pair.

    For user-item backbones a pair's query is its user; for a sequential backbone it is a
    history prefix, so the same user may appear once per position.

    Attributes:
        users: (P,) the user of each pair.
        items: (P,) the positive item of each pair.
        pair_ids: (P,) the pair's index among the ``TrainData.n_pairs`` training pairs.
        vectors: (P, d) query vectors (normalised for cosine scores), with gradient.
        item_emb: (I, d) item embeddings (not normalised), with gradient.
        cosine: cosine scores (True) or dot products.
    """

    users: Tensor
    items: Tensor
    pair_ids: Tensor
    vectors: Tensor
    item_emb: Tensor
    cosine: bool
    _table: dict = field(default_factory=dict, repr=False)

    def score(self, items: Tensor) -> Tensor:
        """(P, M) item ids -> (P, M) scores with gradient (see :func:`score_candidates`)."""
        return score_candidates(self.vectors, self.item_emb, items, self.cosine)

    def score_shared(self, items: Tensor) -> tuple[Tensor, Tensor]:
        """Scores of each query's own positive and of M items shared by every query.

        Args:
            items: (M,) item ids (one draw for the whole batch).
        Returns:
            pos (P,) and shared (P, M) scores with gradient: one gather of the P + M item rows
            (one backward into the item table) and one (P, d) x (d, M) matmul, whatever the
            catalogue size.
        """
        rows = take_rows(self.item_emb, torch.cat([self.items, items]))
        rows = F.normalize(rows, dim=-1) if self.cosine else rows
        own, shared = rows[: self.items.numel()], rows[self.items.numel():]
        return (self.vectors * own).sum(-1), self.vectors @ shared.T

    def score_groups(self, items: Tensor) -> tuple[Tensor, Tensor]:
        """Scores of each query's own positive and of its group's M items.

        Rows are split into consecutive groups of s = ceil(P / G) rows (row r is in group
        r // s; the loader shuffles rows, so the groups are random); group g scores
        ``items[g]``.

        Args:
            items: (G, M) item ids, one draw per group; G = ceil(P / s) groups.
        Returns:
            pos (P,) and (P, M) scores with gradient: a batched (s, d) x (d, M) matmul per
            group over the G * M gathered item rows, or, when gathering those rows costs
            more than scoring the whole catalogue (:data:`GATHER_COST_IN_MACS`), one full
            (P, d) x (d, I) matmul and a gather.
        """
        n_groups, m = items.shape
        p, dim = self.vectors.shape
        n_items = self.item_emb.shape[0]
        if n_groups * m * GATHER_COST_IN_MACS + p * m >= p * n_items:
            table = F.normalize(self.item_emb, dim=-1) if self.cosine else self.item_emb
            scores = self.vectors @ table.T
            return scores.gather(1, self.items.unsqueeze(1)).squeeze(1), scores.gather(1, draws_per_row(items, p))
        rows = take_rows(self.item_emb, torch.cat([self.items, items.reshape(-1)]))
        rows = F.normalize(rows, dim=-1) if self.cosine else rows
        own, drawn = rows[:p], rows[p:].view(n_groups, m, dim)
        return (self.vectors * own).sum(-1), grouped_scores(self.vectors, drawn)

    @torch.no_grad()
    def full_rows(self, rows: Tensor) -> Tensor:
        """(r,) row indices into this batch -> (r, n_items) scores of every item for those
        rows' queries, without gradient; the normalised table is built once per batch."""
        if "t" not in self._table:
            table = self.item_emb.detach()
            table = F.normalize(table, dim=-1) if self.cosine else table
            self._table["t"] = table
        return self.vectors.detach()[rows] @ self._table["t"].T


@dataclass
class LossBatch:
    """Inputs of a loss for one batch of P training pairs with N negatives each.

    Attributes:
        pos: (P,) scores s_ui of the positive items, with gradient.
        neg: (P, N) scores s_uj of the negatives, with gradient.
        users: (P,) user ids (for per-user state).
        items: (P,) positive item ids.
        negatives: (P, N) negative item ids.
        pair_ids: (P,) index of each pair among the training pairs (for per-pair state).
        full_scores: (r,) row indices of this batch -> (r, n_items) scores of every item
            for those rows' queries, without gradient (exact ranks, per-query thresholds).
        neg_valid: (P, N) bool, False where a negative column is one of the row's own training
            positives (shared negatives: one draw for the whole batch or per group of rows;
            its scores there are -inf); None when every column is a true negative (per-pair
            negatives).
        scorer: the backbone, as far as a loss or an estimator may use it (the one way a
            loss reaches the model during training; it scores with the current weights,
            so after the optimiser step it sees the updated model).
        draws: the shared draw(s) behind ``negatives`` (shared negatives: (N,) for the batch or
            (G, N), one per group of rows, :func:`draws_per_row`), so that an estimator can score
            a draw once per group; None for per-pair negatives.
        pos_log_q: (P,) log Q(i) of each positive under the sampler that drew the negatives (one
            draw's probability of item i: -log I when uniform, ``train.sampler=popularity``
            otherwise); only for a loss with ``uses_log_q`` (a logQ correction), else None.
        neg_log_q: (P, N) log Q(j) of each negative (the same proposal as ``pos_log_q``). Only with
            ``uses_log_q``.
        log_q_kept: (P,) what the draw of a row's negatives was restricted to: per-pair draws redraw
            the user's training positives, so each negative's actual proposal is
            Q(j) / (1 - Q(P_u)), and this is log(1 - Q(P_u)); 0 for shared draws (positives masked,
            the proposal is Q itself). Only with ``uses_log_q``.
        queries: the encoded batch (query vectors and the item table, with gradient), for a loss
            that picks its own candidates from the catalogue (SCE).
        generator: the step's random stream (keyed by run seed, epoch and batch, after the
            negatives were drawn), for a loss's own randomness: the same in a resumed run.
    """

    pos: Tensor
    neg: Tensor
    users: Tensor | None = None
    items: Tensor | None = None
    negatives: Tensor | None = None
    pair_ids: Tensor | None = None
    full_scores: Callable[[Tensor], Tensor] | None = None
    scorer: Scorer | None = None
    neg_valid: Tensor | None = None
    draws: Tensor | None = None
    pos_log_q: Tensor | None = None
    neg_log_q: Tensor | None = None
    log_q_kept: Tensor | None = None
    queries: Queries | None = None
    generator: torch.Generator | None = None

    def require(self, name: str) -> Any:
        """The field ``name``; a clear error when the batch was built without it (losses
        that keep per-user state or use the model need more than ``pos`` and ``neg``)."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"this loss needs LossBatch.{name}; build the batch with it (bench.step.train_step does)")
        return value


#: (buffer, rows) written by one training step, to be shared across data-parallel ranks
SyncedRows = list[tuple[Tensor, Tensor]]
