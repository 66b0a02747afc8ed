"""A finished run's data and trained backbone, rebuilt from its results and checkpoints
(for analyses after the fact: the threshold study, re-evaluation under another protocol)."""

from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from bench.contracts import TrainData
from bench.errors import BenchError
from bench.models.base import EmbeddingModel
from bench.results import RunResult
from bench.run import build_datamodule
from bench.tasks.datamodule import RankingDataModule


def run_datamodule(res: RunResult) -> RankingDataModule:
    """The run's data module: the same data, task and seeded splits as in training."""
    return build_datamodule(OmegaConf.create(res.config), res.seed)


def load_model(res: RunResult, checkpoint: str | Path, train_data: TrainData) -> EmbeddingModel:
    """The run's backbone, bound to ``train_data`` (graph backbones rebuild their adjacency),
    with the weights of a Lightning checkpoint (``best.ckpt``, ``last.ckpt`` or any path)."""
    path = Path(checkpoint)
    if not path.is_file():
        raise BenchError(f"no checkpoint {path}")
    model = instantiate(OmegaConf.create(res.config).model, n_users=train_data.n_users, n_items=train_data.n_items)
    model.bind(train_data)
    state = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    model.load_state_dict({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")})
    return model
