"""Backbones, looked up by name in :data:`MODELS`.

Adding a backbone: a module in this package with an
:class:`~bench.models.base.EmbeddingModel` subclass decorated ``@MODELS.register("name")``,
plus ``conf/model/name.yaml``. Modules here are discovered automatically.
"""

from typing import Any

from bench.models.base import EmbeddingModel
from bench.models.gnn import GNN
from bench.models.lightgcn import LightGCN, XSimGCL
from bench.models.ltr import LinearScorer, MLPScorer, TransformerScorer
from bench.models.mf import MF
from bench.models.registry import MODELS
from bench.models.sasrec import SASRec

__all__ = ["GNN", "MODELS", "EmbeddingModel", "LightGCN", "LinearScorer", "MF", "MLPScorer", "SASRec",
           "TransformerScorer", "XSimGCL", "build"]


def build(name: str, recipe: dict | None = None, **kwargs: Any) -> EmbeddingModel:
    """Instantiate the backbone registered as ``name`` (the Hydra ``_target_`` of
    conf/model/*); ``recipe`` (optimiser settings the config reads) is not the model's
    business."""
    return MODELS.build(name, **kwargs)
