"""Common scoring for embedding backbones.

A backbone produces user and item embeddings ``E_U (n_users, d)`` and ``E_I (n_items, d)``;
the score of user u for item i is ``s_ui = f(e_u, e_i)`` with f the dot product or the
cosine similarity (``score`` setting; the SL family in the SL@K paper uses cosine, BPR
and LambdaLoss the dot product).

A backbone does two things: it *encodes* a loader batch into one query vector per
training pair (:meth:`EmbeddingModel.encode`) and it *scores* (the
:class:`~bench.contracts.Scorer` protocol, plus :meth:`EmbeddingModel.full_scorer` for
evaluation). The training step (:mod:`bench.step`) does the rest.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.contracts import Queries, TrainData, grouped_scores, score_candidates, take_rows
from bench.errors import ConfigError

SCORES = ("dot", "cosine")


class EmbeddingModel(nn.Module):
    """Base class: subclasses implement :meth:`embeddings`.

    ``tasks`` names the tasks (``task=...``) a backbone fits.

    Args:
        n_users, n_items: catalogue sizes.
        score: "dot" or "cosine".
    """

    n_users: int
    n_items: int

    tasks: tuple[str, ...] = ("cf", "linkpred")
    #: buffers that :meth:`bind` builds from the training data (a graph's sparse matrices): every
    #: data-parallel rank builds the same ones, so DDP leaves them alone (it cannot broadcast sparse tensors)
    bound_buffers: tuple[str, ...] = ()

    def __init__(self, n_users: int, n_items: int, score: str = "cosine") -> None:
        super().__init__()
        if score not in SCORES:
            raise ConfigError(f"unknown model.score '{score}'; known: {', '.join(SCORES)}")
        self.n_users = n_users
        self.n_items = n_items
        self.score = score

    @property
    def cosine(self) -> bool:
        return self.score == "cosine"

    def embeddings(self) -> tuple[Tensor, Tensor]:
        """(n_users, d) user and (n_items, d) item embeddings, before normalisation."""
        raise NotImplementedError

    def bind(self, data: TrainData) -> None:
        """Called once with the training data before training; graph backbones build
        their adjacency here."""

    def extra_loss(self, users: Tensor, items: Tensor) -> Tensor | None:
        """A term the backbone adds to the recommendation loss (XSimGCL's contrastive
        loss), computed from the last training forward; None for most backbones."""
        return None

    def embedding_penalty(self, users: Tensor, items: Tensor, negatives: Tensor) -> Tensor:
        """½ (Σ ‖e_u‖² + Σ ‖e_i‖² + Σ ‖e_j‖²) / P: the squared norms of the rows of the backbone's own
        embedding tables (``user_emb``, ``item_emb``; a graph backbone's layer-0 rows) that a step's
        P pairs use, averaged over the pairs; ``train.embedding_reg`` multiplies it.

        Args:
            users, items: (P,) each pair's user and positive item.
            negatives: the step's negatives, any shape (every entry counts once).
        Returns:
            a scalar with gradient on those rows only.
        """
        user_table, item_table = getattr(self, "user_emb", None), getattr(self, "item_emb", None)
        if not isinstance(user_table, nn.Embedding) or not isinstance(item_table, nn.Embedding):
            raise ConfigError(f"train.embedding_reg regularises user and item embedding tables, which model "
                              f"{type(self).__name__} does not have; set train.embedding_reg=0 (and use "
                              "optimizer.weight_decay)")
        rows = (take_rows(user_table.weight, users), take_rows(item_table.weight, items),
                take_rows(item_table.weight, negatives.reshape(-1)))
        return 0.5 * torch.stack([r.pow(2).sum() for r in rows]).sum() / max(users.numel(), 1)

    def normalise(self, x: Tensor) -> Tensor:
        """Rows of ``x`` as the score function sees them (unit length for cosine)."""
        return F.normalize(x, dim=-1) if self.cosine else x

    # training -------------------------------------------------------------------------
    def encode(self, rows: Tensor) -> Queries:
        """A loader batch as training queries.

        Args:
            rows: (B, 3) (user, positive item, training-pair id) from the data module.
        Returns:
            :class:`~bench.contracts.Queries` with one query per row (its user).
        """
        users, items, pair_ids = rows[:, 0], rows[:, 1], rows[:, 2]
        user_emb, item_emb = self.embeddings()
        vectors = self.training_queries(take_rows(user_emb, users))
        return Queries(users=users, items=items, pair_ids=pair_ids, vectors=self.normalise(vectors),
                       item_emb=item_emb, cosine=self.cosine)

    def training_queries(self, vectors: Tensor) -> Tensor:
        """(P, d) the batch's user vectors before normalisation -> what the loss scores with (SimpleX
        drops some out); the scorer methods never pass through here. The identity by default."""
        return vectors

    # the Scorer protocol -----------------------------------------------------------------
    def score_items(self, users: Tensor, items: Tensor) -> Tensor:
        """Scores of M given items per user.

        Args:
            users: (B,) user ids; items: (B, M) item ids.
        Returns:
            (B, M) scores s_ui, with gradient.
        """
        user_emb, item_emb = self.embeddings()
        return score_candidates(self.normalise(take_rows(user_emb, users)), item_emb, items, self.cosine)

    def score_users(self, users: Tensor) -> Tensor:
        """(B, n_items) scores of all items for ``users`` (B,), with gradient."""
        user_emb, item_emb = self.embeddings()
        return self.normalise(take_rows(user_emb, users)) @ self.normalise(item_emb).T

    def score_groups(self, users: Tensor, items: Tensor, draws: Tensor) -> tuple[Tensor, Tensor]:
        """(B, L) scores of each row's ``items`` and (B, M) of its group's draw, ``draws`` (G, M),
        from one call of :meth:`embeddings` (:meth:`bench.contracts.Scorer.score_groups`)."""
        user_emb, item_emb = self.embeddings()
        queries = self.normalise(take_rows(user_emb, users))
        return (score_candidates(queries, item_emb, items, self.cosine),
                grouped_scores(queries, self.normalise(take_rows(item_emb, draws))))

    # evaluation ---------------------------------------------------------------------------
    @torch.no_grad()
    def full_scorer(self, stage: str = "valid") -> Callable[[Tensor], Tensor]:
        """A function users (B,) -> (B, n_items) scores, for evaluation.

        The embeddings (a propagation for graph backbones) and their normalisation are
        computed once here, not once per chunk of users. ``stage`` ("valid" or "test")
        matters to backbones whose user state depends on the history seen (SASRec).
        """
        user_emb, item_emb = self.embeddings()
        users_n, items_t = self.normalise(user_emb), self.normalise(item_emb).T.contiguous()
        return lambda users: users_n[users] @ items_t
