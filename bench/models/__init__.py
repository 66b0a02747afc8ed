"""Backbones. ``MODELS.build(name, n_users=..., n_items=..., **cfg)``."""

from bench.registry import Registry

MODELS: Registry = Registry("model", package="bench.models")

from bench.models.base import EmbeddingModel  # noqa: E402
from bench.models.mf import MF  # noqa: E402
from bench.models.lightgcn import LightGCN, XSimGCL  # noqa: E402
from bench.models.gnn import GNN  # noqa: E402
from bench.models.sasrec import SASRec  # noqa: E402

__all__ = ["GNN", "MODELS", "EmbeddingModel", "LightGCN", "MF", "SASRec", "XSimGCL", "build"]


def build(name: str, recipe: dict | None = None, **kwargs):
    """Instantiate the backbone registered as ``name`` (Hydra ``_target_``); ``recipe``
    (optimiser settings the config reads) is not the model's business."""
    return MODELS.get(name)(name=name, **kwargs)
