"""Planetoid citation graphs (Cora, CiteSeer) from the local raw files."""

import pytest

from bench.datasets import Planetoid


@pytest.mark.parametrize("name,nodes,edges", [("cora", 2708, 5278), ("citeseer", 3327, 4552)])
def test_planetoid_graphs_load_from_the_local_raw_files(shared_data, tmp_path, name, nodes, edges):
    graph = Planetoid(name, data_dir=str(shared_data), cache_dir=str(tmp_path), download=False).load()
    assert graph.n_nodes == nodes and graph.edges.shape == (edges, 2)
    assert (graph.edges[:, 0] < graph.edges[:, 1]).all()


#: a process that imports once, then loads Cora into cache<trial> as soon as the test says go<trial>
LOAD = """
import os, sys, time
from pathlib import Path
from bench.datasets import Planetoid
work = Path(sys.argv[2])
(work / f"ready-{os.getpid()}").touch()
for trial in range(int(sys.argv[3])):
    while not (work / f"go{trial}").exists():
        time.sleep(0.001)
    cache = str(work / f"cache{trial}")
    print(Planetoid("cora", data_dir=sys.argv[1], cache_dir=cache, download=False).load().edges.shape[0], flush=True)
    (work / f"done{trial}-{os.getpid()}").touch()
"""


def _wait_for(folder, pattern, count, procs):
    import time

    deadline = time.monotonic() + 120
    while len(list(folder.glob(pattern))) < count:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), pattern
        time.sleep(0.01)


@pytest.mark.slow
def test_runs_started_together_on_an_empty_cache_all_load_the_graph(shared_data, tmp_path):
    """Three processes processing Cora into one empty cache at once, three times (the first unlocked
    version left one reading PyG's half-written processed file: a traceback, 1 trial in 3 here). The
    processes import first and start each trial on one signal, so they race from the same instant."""
    import subprocess
    import sys

    trials = 3
    procs = [subprocess.Popen([sys.executable, "-c", LOAD, str(shared_data), str(tmp_path), str(trials)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        _wait_for(tmp_path, "ready-*", 3, procs)
        for trial in range(trials):
            (tmp_path / f"go{trial}").touch()
            _wait_for(tmp_path, f"done{trial}-*", 3, procs)
    finally:
        outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-500:] for _, err in outs]
    assert [out.split() for out, _ in outs] == [["5278"] * trials] * 3
