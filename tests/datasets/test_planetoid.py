"""Planetoid citation graphs (Cora, CiteSeer) from the local raw files."""

import pytest

from bench.datasets import Planetoid


@pytest.mark.parametrize("name,nodes,edges", [("cora", 2708, 5278), ("citeseer", 3327, 4552)])
def test_planetoid_graphs_load_from_the_local_raw_files(shared_data, tmp_path, name, nodes, edges):
    graph = Planetoid(name, data_dir=str(shared_data), cache_dir=str(tmp_path), download=False).load()
    assert graph.n_nodes == nodes and graph.edges.shape == (edges, 2)
    assert (graph.edges[:, 0] < graph.edges[:, 1]).all()
