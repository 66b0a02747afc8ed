"""Graphs: the synthetic graph and the train / valid / test edge split."""

import pytest
import torch

from bench.datasets import SyntheticGraph, split_edges


@pytest.mark.parametrize("graph_seed", [0, 1])
def test_edge_split_has_no_leakage_in_either_direction(graph_seed):
    graph = SyntheticGraph(n_nodes=200, seed=graph_seed).load()
    s = split_edges(graph, valid_fraction=0.1, test_fraction=0.2, seed=3)
    train = set(map(tuple, s.train.to_pairs().tolist()))
    for held in (s.valid, s.test):
        for u, v in held.to_pairs().tolist():
            assert (u, v) not in train and (v, u) not in train
    und = lambda csr: {tuple(sorted(p)) for p in csr.to_pairs().tolist()}
    assert und(s.train) | und(s.valid) | und(s.test) == set(map(tuple, graph.edges.tolist()))
    assert len(und(s.test)) == round(0.2 * graph.edges.shape[0]) and s.test.nnz == 2 * len(und(s.test))
    assert torch.equal(split_edges(graph, 0.1, 0.2, seed=3).test.indices, s.test.indices)  # fixed by the seed
