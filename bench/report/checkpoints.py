"""A finished run's data and trained backbone, rebuilt from its results and checkpoints
(for analyses after the fact: the threshold study, re-evaluation under another protocol)."""

from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig

from bench.composition import recompose_run
from bench.contracts import TrainData
from bench.errors import BenchError
from bench.models.base import EmbeddingModel
from bench.results import RunResult
from bench.results.io import load_checkpoint
from bench.run import build_datamodule
from bench.tasks.datamodule import RankingDataModule


def run_config(res: RunResult) -> DictConfig:
    """The run's config, rebuilt from this code's ``conf/`` and the run's recorded overrides
    (never from the folder's own ``_target_`` entries), checked against the saved values."""
    if res.run_dir is None:
        raise BenchError("a run read from a folder is needed to rebuild it")
    return recompose_run(res, res.run_dir)


def run_datamodule(res: RunResult) -> RankingDataModule:
    """The run's data module: the same data, task and seeded splits as in training."""
    return build_datamodule(run_config(res), res.seed)


def load_model(res: RunResult, checkpoint: str | Path, train_data: TrainData) -> EmbeddingModel:
    """The run's backbone, bound to ``train_data`` (graph backbones rebuild their adjacency),
    with the weights of a Lightning checkpoint (``best.ckpt``, ``last.ckpt`` or any path)."""
    path = Path(checkpoint)
    if not path.is_file():
        raise BenchError(f"no checkpoint {path}")
    model = instantiate(run_config(res).model, n_users=train_data.n_users, n_items=train_data.n_items)
    model.bind(train_data)
    state = load_checkpoint(path)["state_dict"]
    model.load_state_dict({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")})
    return model
