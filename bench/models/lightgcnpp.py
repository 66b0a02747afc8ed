"""LightGCN++ (Lee, Kim, Shin, RecSys 2024): LightGCN with its neighbour weighting, its layer
normalisation and its pooling made adjustable."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.contracts import TrainData
from bench.datasets.base import CSR
from bench.models.lightgcn import LightGCN, layer_mean
from bench.models.registry import MODELS


def scaled_adjacency(train: CSR, n_users: int, n_items: int, alpha: float, beta: float) -> Tensor:
    r"""The bipartite adjacency :math:`D^{-\alpha} A D^{-\beta}`: a message from node v to node w
    weighs :math:`1 / (|N_w|^\alpha |N_v|^\beta)` (receiver's degree to α, sender's to β); α = β = 1/2
    is LightGCN's symmetric normalisation. Nodes: users, then items.

    Returns:
        a coalesced sparse COO tensor (n_users + n_items, n_users + n_items); row w holds w's senders.
    """
    pairs = train.to_pairs()
    users, items = pairs[:, 0], pairs[:, 1] + n_users
    n = n_users + n_items
    deg = torch.bincount(torch.cat([users, items]), minlength=n).double().clamp(min=1)
    rows, cols = torch.cat([users, items]), torch.cat([items, users])
    weight = (deg[rows].pow(-alpha) * deg[cols].pow(-beta)).float()
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), weight, (n, n), check_invariants=True).coalesce()


@MODELS.register("lightgcnpp")
class LightGCNpp(LightGCN):
    r"""LightGCN++:

    .. math::
        e^{(k+1)}_w = \sum_{v \in N_w} \frac{1}{|N_w|^{\alpha}|N_v|^{\beta}}\,
                      \frac{e^{(k)}_v}{\lVert e^{(k)}_v\rVert},\qquad
        e_w = \gamma\, e^{(0)}_w + (1-\gamma)\,\frac1K\sum_{k=1}^{K} e^{(k)}_w,

    every layer's input L2-normalised (layer 0 included), the free embedding :math:`e^{(0)}` pooled
    with its own weight γ. α = β = 1/2, no normalisation and γ = 1/(K+1) give LightGCN back.

    Args:
        n_users, n_items, dim, score, init, init_std: as :class:`~bench.models.mf.MF`.
        layers: K (2 in the authors' code; 3 in the SL@K authors' IR-Benchmark).
        alpha, beta: the receiver's and the sender's degree exponents (0.6, -0.1: the authors' default).
        gamma: layer 0's weight in the pooling (0.2).
    """

    def __init__(self, n_users: int, n_items: int, dim: int = 64, layers: int = 2, alpha: float = 0.6,
                 beta: float = -0.1, gamma: float = 0.2, score: str = "cosine", init: str = "auto",
                 init_std: float = 1.0) -> None:
        super().__init__(n_users, n_items, dim=dim, layers=layers, score=score, init=init, init_std=init_std)
        self.alpha, self.beta, self.gamma = float(alpha), float(beta), float(gamma)

    def bind(self, data: TrainData) -> None:
        # with different receiver and sender exponents the matrix is not symmetric
        self.set_adjacency(scaled_adjacency(data.train, self.n_users, self.n_items, self.alpha, self.beta),
                           symmetric=self.alpha == self.beta)

    def propagate(self, ego: Tensor) -> list[Tensor]:
        out, x = [], ego
        for _ in range(self.layers):
            x = self.spread(F.normalize(x, dim=1, eps=1e-12))
            out.append(x)
        return out

    def embeddings(self) -> tuple[Tensor, Tensor]:
        ego = torch.cat([self.user_emb.weight, self.item_emb.weight])
        layers = self.propagate(ego)
        final = ego if not layers else self.gamma * ego + (1 - self.gamma) * layer_mean(layers)
        return self.split_nodes(final)
