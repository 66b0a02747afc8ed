"""A finished run's data and trained backbone, rebuilt from its results and checkpoints
(for analyses after the fact: the threshold study, re-evaluation under another protocol)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig
from torch import Tensor, nn

from bench.composition import recompose_run
from bench.contracts import TrainData
from bench.errors import BenchError
from bench.evaluation.evaluator import split_tie_columns, tie_summary
from bench.models.base import EmbeddingModel
from bench.records import RunResult
from bench.records.io import load_checkpoint
from bench.tasks.datamodule import RankingDataModule
from bench.tasks.ltr import LtrDataModule
from bench.training import build_datamodule


def run_config(res: RunResult) -> DictConfig:
    """The run's config, rebuilt from this code's ``conf/`` and the run's recorded overrides
    (never from the folder's own ``_target_`` entries), checked against the saved values."""
    if res.run_dir is None:
        raise BenchError("a run read from a folder is needed to rebuild it")
    return recompose_run(res, res.run_dir)


def run_datamodule(res: RunResult) -> RankingDataModule:
    """The run's data module: the same data, task and seeded splits as in training."""
    datamodule = build_datamodule(run_config(res), res.seed)
    if not isinstance(datamodule, RankingDataModule):
        raise BenchError(f"{res.run_dir} is a task=ltr run: its lists have no catalogue to rank or thresholds to "
                         "study; bench.analysis.checkpoints.retest tests it again")
    return datamodule


def _load_weights(model: nn.Module, path: Path) -> None:
    state = load_checkpoint(path)["state_dict"]
    model.load_state_dict({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")})


def load_model(res: RunResult, checkpoint: str | Path, train_data: TrainData,
               cfg: DictConfig | None = None) -> EmbeddingModel:
    """The run's backbone, bound to ``train_data`` (graph backbones rebuild their adjacency),
    with the weights of a Lightning checkpoint (``best.ckpt``, ``last.ckpt`` or any path), in
    evaluation mode.
    ``cfg``: the run's config when the caller has already rebuilt it (else rebuilt here)."""
    path = Path(checkpoint)
    if not path.is_file():
        raise BenchError(f"no checkpoint {path}")
    model = instantiate((cfg or run_config(res)).model, n_users=train_data.n_users, n_items=train_data.n_items)
    model.bind(train_data)
    _load_weights(model, path)
    return model.eval()  # scored as at test time: no dropout, no training-mode noise (XSimGCL)


def retest(res: RunResult, eval_overrides: Sequence[str] = (), checkpoint: str | Path | None = None,
           ) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
    """A finished run's test evaluation again, under other ``eval.*`` settings (another tie
    rule, validation items left unmasked, other cut-offs), with the same code path as a run.

    Args:
        res: a completed run.
        eval_overrides: e.g. ``["eval.test_masks_valid=false"]``; only ``eval.*`` keys.
        checkpoint: the weights to test (default: the run's best checkpoint).
    Returns:
        (users (U,), per-user metrics {name: (U,) float64}, the ties' summary).
    """
    if res.run_dir is None or res.best_checkpoint is None:
        raise BenchError(f"{res.run_dir}: no best checkpoint to test; only a completed run can be tested again")
    cfg = recompose_run(res, res.run_dir, extra=eval_overrides, evaluation=True)
    datamodule = build_datamodule(cfg, res.seed)
    path = Path(checkpoint or res.best_checkpoint)
    if isinstance(datamodule, LtrDataModule):  # a list scorer: no catalogue, no binding
        if not path.is_file():
            raise BenchError(f"no checkpoint {path}")
        scorer = instantiate(cfg.model, **datamodule.model_kwargs())
        _load_weights(scorer, path)
        per_query = datamodule.test_evaluator.evaluate(scorer.eval())
        metrics, tie_columns = split_tie_columns(per_query)
        return datamodule.test_evaluator.users, metrics, tie_summary(metrics, tie_columns,
                                                                      datamodule.test_evaluator.ties)
    model = load_model(res, path, datamodule.train_data, cfg)
    evaluator = datamodule.test_evaluator
    metrics, tie_columns = split_tie_columns(evaluator.evaluate(model.full_scorer("test")))
    return evaluator.users, metrics, tie_summary(metrics, tie_columns, evaluator.ties)
