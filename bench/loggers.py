"""Experiment loggers: CSV always available, W&B that never blocks or prompts."""

from __future__ import annotations

import logging
import netrc
import os
import socket
from typing import TYPE_CHECKING, Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from bench.errors import ConfigError
from bench.records.configuration import variant_suffix

if TYPE_CHECKING:
    from lightning.pytorch.loggers import Logger

log = logging.getLogger(__name__)

WANDB_HOST = "api.wandb.ai"

def run_variant(overrides: list[str] | None = None) -> str:
    """The W&B group suffix of a run: its overrides that make a configuration of their own
    (``-loss.tau=0.1``; see :func:`bench.records.variant_overrides`), or a digest when long.

    Without ``overrides``, reads those of the current Hydra job (none outside Hydra).
    """
    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    return variant_suffix(overrides)


def _has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(WANDB_HOST) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def _reachable(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_wandb_mode(mode: str = "auto") -> tuple[str, str]:
    """("online" | "offline" | "disabled", reason). ``auto`` goes online only with
    credentials and a reachable server; ``$WANDB_MODE`` wins when set."""
    env = os.environ.get("WANDB_MODE")
    if mode == "auto" and env:
        return env, f"WANDB_MODE={env}"
    if mode != "auto":
        return mode, f"logger.wandb.mode={mode}"
    if not _has_wandb_credentials():
        return "offline", "no W&B credentials (WANDB_API_KEY or `wandb login`)"
    if not _reachable(WANDB_HOST):
        return "offline", f"{WANDB_HOST} is not reachable"
    return "online", "credentials found"


def wandb_logger(project: str = "bench", entity: str | None = None, group: str | None = None,
                 job_type: str = "train", name: str | None = None, tags: list[str] | None = None,
                 save_dir: str = ".", mode: str = "auto", run_id: str | None = None, **kwargs: Any) -> Logger:
    """A Lightning ``WandbLogger`` that falls back to offline mode instead of prompting.

    Args:
        project, entity, group, job_type, name, tags: W&B run fields (group is
            dataset-model-loss so that seeds of one configuration aggregate).
        save_dir: the run's output directory (W&B files go to ``save_dir/wandb``).
        mode: "auto", "online", "offline" or "disabled".
        run_id: resume this W&B run (used when a run is resumed).
    """
    from lightning.pytorch.loggers import WandbLogger

    resolved, reason = resolve_wandb_mode(mode)
    if resolved == "online" and not _has_wandb_credentials():
        raise ConfigError("W&B online logging needs credentials: set WANDB_API_KEY or run `wandb login`, or use "
                          "logger.wandb.mode=auto (falls back to offline) or offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    if resolved == "offline":
        log.warning("W&B logs offline (%s); upload later with: wandb sync %s/wandb/offline-run-*", reason, save_dir)
    extra: dict[str, Any] = {"id": run_id, "resume": "allow"} if run_id else {}
    logger = WandbLogger(project=project, entity=entity, group=group, job_type=job_type, name=name,
                         tags=list(tags or []), save_dir=save_dir, mode=resolved, **extra, **kwargs)
    # Lightning passes anonymous=None, which W&B now warns has no effect: leave the setting unset
    logger._wandb_init.pop("anonymous", None)
    return logger


def _needs(module: str, extra: str, logger: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"logger={logger} needs {module}: pip install -e \".[{extra}]\" "
                          f"(or pip install \"bench[{extra}]\")")


def mlflow_logger(experiment_name: str = "bench", tracking_uri: str | None = None, run_name: str | None = None,
                  group: str | None = None, tags: dict[str, Any] | None = None) -> Logger:
    """Lightning's ``MLFlowLogger`` with the run's group among its tags (seeds of one configuration
    share it), hyperparameters and metrics as MLflow params and metrics.

    Args:
        experiment_name: the MLflow experiment.
        tracking_uri: a server or store; None: ``file:./mlruns`` in the working directory.
        run_name, group, tags: as for W&B (``group`` is dataset-model-loss plus variant overrides).
    """
    _needs("mlflow", "mlflow", "mlflow")
    from lightning.pytorch.loggers import MLFlowLogger

    uri = tracking_uri or f"file:{os.path.abspath('mlruns')}"
    if uri.startswith("file:"):  # no server, no database: MLflow 3 asks to opt in to its file store
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MLFlowLogger(experiment_name=experiment_name, tracking_uri=uri, run_name=run_name,
                        tags={**{k: str(v) for k, v in (tags or {}).items()}, "group": str(group)})


def tensorboard_logger(save_dir: str, group: str, seed: int) -> Logger:
    """Lightning's ``TensorBoardLogger`` writing ``<run folder>/tensorboard``; the run is named by its
    group and seed so that a sweep folder's runs read as ``<group>/seed<k>`` in TensorBoard."""
    _needs("tensorboard", "tensorboard", "tensorboard")
    from lightning.pytorch.loggers import TensorBoardLogger

    return TensorBoardLogger(save_dir=save_dir, name="tensorboard", version=f"{group}-seed{seed}",
                             default_hp_metric=False)


def build_loggers(cfg: DictConfig | None) -> list[Logger]:
    """Instantiate every logger under the ``logger`` config node (empty for ``logger=none``)."""
    if not cfg:
        return []
    return [instantiate(spec) for spec in cfg.values() if spec is not None]
