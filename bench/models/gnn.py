"""A GNN encoder for link prediction (PyG's GCNConv or SAGEConv)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.contracts import TrainData
from bench.errors import ConfigError
from bench.models.base import EmbeddingModel
from bench.models.registry import MODELS

CONVS = ("gcn", "sage")


@MODELS.register("gnn")
class GNN(EmbeddingModel):
    r"""Node embeddings :math:`Z = \mathrm{GNN}(X, A_{train})`; score :math:`s_{uv} = f(z_u, z_v)`.

    ``layers`` graph convolutions (hidden width ``hidden``, ReLU and dropout between),
    over the training edges only, from the node features given by :meth:`bind`.

    Args:
        n_users, n_items: the number of nodes (equal).
        dim: output embedding size. hidden: hidden width. layers: number of convolutions.
        conv: "gcn" (GCNConv, symmetric normalisation with self-loops) or "sage" (SAGEConv, mean).
        dropout: between layers, in training.
        score: "dot" (default for link prediction) or "cosine".
    """

    features: Tensor  # buffers set by bind()
    edge_index: Tensor

    tasks = ("linkpred",)

    def __init__(self, n_users: int, n_items: int, dim: int = 64, hidden: int = 256, layers: int = 2,
                 conv: str = "gcn", dropout: float = 0.5, score: str = "dot") -> None:
        super().__init__(n_users, n_items, score)
        if conv not in CONVS:
            raise ConfigError(f"unknown model.conv '{conv}'; known: {', '.join(CONVS)}")
        if layers < 1:
            raise ConfigError(f"model.layers must be >= 1, got {layers}")
        self.dim, self.hidden, self.n_layers, self.conv, self.dropout = dim, hidden, layers, conv, dropout
        self.convs = nn.ModuleList()
        self.register_buffer("features", torch.zeros(0), persistent=False)
        self.register_buffer("edge_index", torch.zeros(2, 0, dtype=torch.long), persistent=False)

    def bind(self, data: TrainData) -> None:
        from torch_geometric.nn import GCNConv, SAGEConv

        if data.node_features is None:
            raise ConfigError("model=gnn needs node features: use task=linkpred with dataset=cora or citeseer")
        layer = GCNConv if self.conv == "gcn" else SAGEConv
        widths = [data.node_features.shape[1]] + [self.hidden] * (self.n_layers - 1) + [self.dim]
        self.convs = nn.ModuleList(layer(a, b) for a, b in zip(widths[:-1], widths[1:]))
        device = self.features.device
        self.features = data.node_features.to(device)
        self.edge_index = data.train.to_pairs().T.contiguous().to(device)  # both directions already

    def embeddings(self) -> tuple[Tensor, Tensor]:
        x = self.features
        for i, conv in enumerate(self.convs):
            x = conv(x, self.edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), p=self.dropout, training=self.training)
        return x, x
