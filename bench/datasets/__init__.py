"""Data sources. Each loader has a ``load() -> Interactions`` method; see :mod:`bench.datasets.base`."""

from bench.datasets.base import CFSplits, CSR, Interactions, split_validation
from bench.datasets.custom import CustomFile
from bench.datasets.ir_benchmark import IRBenchmark
from bench.datasets.graph import Graph, SyntheticGraph, split_edges
from bench.datasets.planetoid import Planetoid
from bench.datasets.synthetic import Synthetic

__all__ = ["CFSplits", "CSR", "CustomFile", "Graph", "IRBenchmark", "Interactions", "Planetoid", "Synthetic",
           "SyntheticGraph", "split_edges", "split_validation"]
