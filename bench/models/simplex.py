"""SimpleX (Mao et al., CIKM 2021): MF whose user vector mixes in its interaction history."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bench.contracts import TrainData
from bench.errors import ConfigError
from bench.models.mf import MF
from bench.models.registry import MODELS
from bench.models.sparse import sparse_product, to_csr, transpose_csr


@MODELS.register("simplex")
class SimpleX(MF):
    r"""SimpleX's backbone (the paper pairs it with the CCL loss, ``loss=ccl``; any loss works):

    .. math::
        h_u = g\,e_u + (1-g)\,V\,\frac{1}{|H_u|}\sum_{j \in H_u} e_j,

    :math:`H_u` the user's training items, V a d × d linear map without bias; dropout on
    :math:`h_u` where the loss scores it in training (not in scorer calls such as SL@K's threshold
    refresh). Scores f(h_u, e_i) (cosine in the authors' configs).

    Args:
        n_users, n_items, dim, score, init, init_std: as :class:`~bench.models.mf.MF`.
        gamma: g, the user embedding's share (0.5 in the authors' class and RecBole).
        dropout: on h_u in training (0.1 in RecBole and the authors' Gowalla config).
    """

    bound_buffers = ("history", "history_t")

    def __init__(self, n_users: int, n_items: int, dim: int = 64, gamma: float = 0.5, dropout: float = 0.1,
                 score: str = "cosine", init: str = "auto", init_std: float = 1.0) -> None:
        super().__init__(n_users, n_items, dim=dim, score=score, init=init, init_std=init_std)
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"model.gamma must be in [0, 1], got {gamma}")
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {dropout}")
        self.gamma = float(gamma)
        self.history_map = nn.Linear(dim, dim, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("history", torch.zeros(0), persistent=False)  # (n_users, n_items) CSR
        self.register_buffer("history_t", torch.zeros(0), persistent=False)  # its transpose, for the backward

    def bind(self, data: TrainData) -> None:
        pairs = data.train.to_pairs()
        degree = data.train.degrees().clamp(min=1).float()
        weight = 1.0 / degree[pairs[:, 0]]  # the mean over each user's training items
        history = torch.sparse_coo_tensor(pairs.T, weight, (self.n_users, self.n_items), check_invariants=True)
        self.history = to_csr(history).to(self.user_emb.weight.device)
        self.history_t = transpose_csr(self.history)

    def embeddings(self) -> tuple[Tensor, Tensor]:
        if self.history.numel() == 0:
            raise RuntimeError("bind() the model to the training data first")
        items = self.item_emb.weight
        mean = sparse_product(self.history, items, self.history_t)
        return self.gamma * self.user_emb.weight + (1 - self.gamma) * self.history_map(mean), items

    def training_queries(self, vectors: Tensor) -> Tensor:
        # dropout on the loss's user vectors only: scorer calls in training (threshold estimators, a loss's
        # own scores of other items) see the undropped model, as evaluation does
        return self.dropout(vectors)
