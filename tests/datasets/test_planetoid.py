"""Planetoid citation graphs (Cora, CiteSeer) from the local raw files."""

import pytest

from bench.datasets import Planetoid


@pytest.mark.parametrize("name,nodes,edges", [("cora", 2708, 5278), ("citeseer", 3327, 4552)])
def test_planetoid_graphs_load_from_the_local_raw_files(shared_data, tmp_path, name, nodes, edges):
    graph = Planetoid(name, data_dir=str(shared_data), cache_dir=str(tmp_path), download=False).load()
    assert graph.n_nodes == nodes and graph.edges.shape == (edges, 2)
    assert (graph.edges[:, 0] < graph.edges[:, 1]).all()


LOAD = """
import sys
from bench.datasets import Planetoid
print(Planetoid("cora", data_dir=sys.argv[1], cache_dir=sys.argv[2], download=False).load().edges.shape[0])
"""


@pytest.mark.slow
def test_runs_started_together_on_an_empty_cache_all_load_the_graph(shared_data, tmp_path):
    """Three processes processing Cora into one empty cache at once (the first unlocked version
    left one reading PyG's half-written processed file: a traceback, 1 trial in 3 here)."""
    import subprocess
    import sys

    for trial in range(3):
        cache = str(tmp_path / f"cache{trial}")
        procs = [subprocess.Popen([sys.executable, "-c", LOAD, str(shared_data), cache], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(3)]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], [err[-500:] for _, err in outs]
        assert [out.strip().splitlines()[-1] for out, _ in outs] == ["5278"] * 3
