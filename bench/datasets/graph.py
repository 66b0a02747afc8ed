"""Graphs for link prediction: the container, a seeded edge split, a synthetic generator."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from bench.datasets.base import CSR
from bench.datasets.splits import RankingSplits


@dataclass
class Graph:
    """An undirected graph with node features.

    Attributes:
        name: data set name.
        x: (n_nodes, n_features) float node features.
        edges: (E, 2) int64 undirected edges, each once with u < v, sorted, no self-loops.
    """

    name: str
    x: Tensor
    edges: Tensor
    info: dict = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        return self.x.shape[0]


def split_edges(graph: Graph, valid_fraction: float = 0.05, test_fraction: float = 0.10,
                seed: int = 0) -> RankingSplits:
    """Split undirected edges into train / valid / test, as per-node item lists.

    Each undirected edge goes to exactly one split and appears there in both directions
    (u -> v and v -> u), so no held-out edge is in the training graph either way.

    Args:
        graph: the graph.
        valid_fraction, test_fraction: shares of the edges held out.
        seed: split seed (fixed per data set, so every run seed sees the same split).
    Returns:
        RankingSplits with users = items = nodes.
    """
    n, e = graph.n_nodes, graph.edges.shape[0]
    order = torch.randperm(e, generator=torch.Generator().manual_seed(int(seed)))
    n_test, n_valid = int(round(test_fraction * e)), int(round(valid_fraction * e))
    parts = {"test": order[:n_test], "valid": order[n_test:n_test + n_valid], "train": order[n_test + n_valid:]}

    def both_ways(idx: Tensor) -> CSR:
        und = graph.edges[idx]
        return CSR.from_pairs(torch.cat([und, und.flip(1)]), n, n)

    return RankingSplits(name=graph.name, n_users=n, n_items=n, train=both_ways(parts["train"]),
                    valid=both_ways(parts["valid"]), test=both_ways(parts["test"]))


class SyntheticGraph:
    """A stochastic block model with informative node features (no download).

    ``n_nodes`` nodes in ``n_blocks`` communities; an edge joins two nodes of the same
    block with probability ``p_in`` and of different blocks with ``p_out``; features are
    the block's one-hot plus Gaussian noise of std ``noise``, padded to ``n_features``.
    """

    def __init__(self, n_nodes: int = 300, n_blocks: int = 6, p_in: float = 0.08, p_out: float = 0.004,
                 n_features: int = 16, noise: float = 0.5, seed: int = 7, name: str = "synthetic-graph") -> None:
        self.n_nodes, self.n_blocks, self.p_in, self.p_out = n_nodes, n_blocks, p_in, p_out
        self.n_features, self.noise, self.seed, self.name = n_features, noise, seed, name

    def load(self) -> Graph:
        gen = torch.Generator().manual_seed(int(self.seed))
        block = torch.randint(0, self.n_blocks, (self.n_nodes,), generator=gen)
        same = block[:, None] == block[None, :]
        prob = torch.where(same, torch.tensor(self.p_in), torch.tensor(self.p_out))
        upper = torch.triu(torch.rand(self.n_nodes, self.n_nodes, generator=gen) < prob, diagonal=1)
        edges = upper.nonzero()
        x = torch.zeros(self.n_nodes, max(self.n_features, self.n_blocks))
        x[torch.arange(self.n_nodes), block] = 1.0
        x = x + self.noise * torch.randn(x.shape, generator=gen)
        return Graph(name=self.name, x=x, edges=edges, info={"generator": "sbm", "seed": self.seed})
