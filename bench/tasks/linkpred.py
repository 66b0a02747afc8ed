"""Link prediction on a graph, as ranking: each source node ranks every node.

Undirected edges are split train / valid / test with a fixed seed (``split_edges``);
a node's held-out neighbours are its relevant items, its training neighbours and the
node itself are masked, and every registered loss trains on the directed training
edges with sampled negative nodes. Two protocols are reported from the same scores:
per source node (Hit@K, MRR@K, ..., averaged over nodes) and per edge (each held-out
(u, v), in both directions, ranks v among all of u's candidates with u's other held-out
neighbours filtered out; MRR and Hits@K averaged over edges: :mod:`bench.evaluation.per_edge`).
The HeaRT benchmark ranks each edge against a few hard negatives instead, so its numbers
are for orientation only.
"""

from __future__ import annotations

from typing import Any

import torch

from bench.datasets.base import CSR
from bench.datasets.graph import Graph, split_edges
from bench.errors import ConfigError
from bench.tasks.datamodule import RankingDataModule


class LinkPredTask:
    """Args:
        valid_fraction, test_fraction: shares of the undirected edges held out (5% / 10%).
        split_seed: seed of the edge split (fixed, so every run seed sees the same split).
    """

    name = "linkpred"

    def __init__(self, valid_fraction: float = 0.05, test_fraction: float = 0.10, split_seed: int = 0,
                 name: str = "linkpred") -> None:
        self.valid_fraction, self.test_fraction, self.split_seed = valid_fraction, test_fraction, split_seed

    def datamodule(self, data: Any, seed: int, **kwargs: Any) -> RankingDataModule:
        if not isinstance(data, Graph):
            raise ConfigError("task=linkpred needs a graph data set (dataset=cora or citeseer), "
                              f"got a {type(data).__name__}")
        splits = split_edges(data, self.valid_fraction, self.test_fraction, self.split_seed)
        n = data.n_nodes
        itself = CSR.from_pairs(torch.arange(n).repeat(2, 1).T, n, n)  # a node is not its own link
        return RankingDataModule(splits, seed=seed, exclude=(itself,), node_features=data.x, per_edge=True, **kwargs)
