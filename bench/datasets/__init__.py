"""Data sources (each loader has a ``load()`` method returning :class:`Interactions` or a
:class:`Graph`), the containers, and the splits every task hands to training."""

from bench.datasets.base import CSR, Interactions
from bench.datasets.custom import CustomFile
from bench.datasets.graph import Graph, SyntheticGraph, split_edges
from bench.datasets.ir_benchmark import IRBenchmark
from bench.datasets.letor import LetorDataset, LetorSplit, Standardizer, read_letor
from bench.datasets.noise import load_dataset
from bench.datasets.planetoid import Planetoid
from bench.datasets.sequence_files import SequenceFile
from bench.datasets.splits import RankingSplits, split_validation
from bench.datasets.synthetic import Synthetic

__all__ = ["CSR", "CustomFile", "Graph", "IRBenchmark", "Interactions", "LetorDataset", "LetorSplit", "Planetoid",
           "RankingSplits", "SequenceFile", "Standardizer", "Synthetic", "SyntheticGraph", "load_dataset", "read_letor",
           "split_edges", "split_validation"]
