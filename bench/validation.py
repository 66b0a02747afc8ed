"""Range checks of the run's numeric settings, before anything is built: a bad value stops the
run with one line naming the key, the value and what is allowed (rather than a traceback deep
inside PyTorch, or a run that completes on nonsense such as ``model.dim=0``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bench.errors import ConfigError


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


#: (key, test, what is allowed); a key absent from the config (or null where allowed) is skipped
RULES: list[tuple[str, Callable[[Any], bool], str]] = [
    ("seed", lambda v: _int(v) and 0 <= v < 2**32, "an integer in [0, 2^32)"),
    # a string ("no", "off") would read as true and overwrite a completed run
    ("force", lambda v: isinstance(v, bool), "true or false (true overwrites the folder's completed run)"),
    ("retain_freed_memory", lambda v: isinstance(v, bool), "true or false"),
    ("optimizer.lr", lambda v: _number(v) and v >= 0, "a number >= 0 (0 evaluates the untrained model)"),
    ("optimizer.weight_decay", lambda v: _number(v) and v >= 0, "a number >= 0"),
    ("train.batch_size", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("train.shared_groups", lambda v: _int(v) and v >= 1, "an integer >= 1 (1: one draw per batch)"),
    ("train.distinct_negatives", lambda v: isinstance(v, bool), "true or false"),
    ("train.embedding_reg", lambda v: _number(v) and v >= 0, "a number >= 0 (0: off), e.g. 1e-4"),
    ("train.early_stopping_patience", lambda v: v is None or (_int(v) and v >= 1), "null or an integer >= 1"),
    ("train.divergence_factor", lambda v: v is None or (_number(v) and v > 1), "null (off) or a number > 1, e.g. 1000"),
    ("trainer.max_epochs", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("trainer.check_val_every_n_epoch", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("eval.ks", lambda v: isinstance(v, list) and len(v) > 0 and all(_int(k) and k >= 1 for k in v),
     "a non-empty list of integers >= 1, e.g. [5,10,20]"),
    ("eval.max_scores", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("eval.test_masks_valid", lambda v: isinstance(v, bool), "true or false"),
    ("eval.sampled_negatives", lambda v: v is None or (_int(v) and v >= 1), "null (off) or an integer >= 1, e.g. 100"),
    ("eval.sampled_seed", lambda v: _int(v) and 0 <= v < 2**63, "an integer in [0, 2^63)"),
    # the data: the generators' sizes and the loaders' splits (a key a data set lacks is skipped)
    ("dataset.n_users", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("dataset.n_items", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("dataset.n_nodes", lambda v: _int(v) and v >= 2, "an integer >= 2"),
    ("dataset.n_blocks", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("dataset.n_features", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("dataset.dim", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("dataset.mean_per_user", lambda v: _number(v) and v >= 1, "a number >= 1"),
    ("dataset.min_per_user", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("dataset.alpha", lambda v: _number(v) and v >= 0, "a number >= 0 (0: uniform popularity)"),
    ("dataset.temperature", lambda v: _number(v) and v > 0, "a number > 0"),
    ("dataset.p_in", lambda v: _number(v) and 0 <= v <= 1, "a probability in [0, 1]"),
    ("dataset.p_out", lambda v: _number(v) and 0 <= v <= 1, "a probability in [0, 1]"),
    ("dataset.noise", lambda v: _number(v) and v >= 0, "a number >= 0"),
    ("dataset.seed", lambda v: _int(v) and v >= 0, "an integer >= 0"),
    ("dataset.split_seed", lambda v: _int(v) and v >= 0, "an integer >= 0"),
    ("dataset.test_fraction", lambda v: _number(v) and 0 < v < 1, "a share in (0, 1), e.g. 0.2"),
    ("dataset.min_rating", lambda v: v is None or _number(v), "null (keep all) or a number, e.g. 4"),
    ("dataset.k_core", lambda v: _int(v) and v >= 1, "an integer >= 1 (1: no filtering)"),
    ("dataset.fold", lambda v: _int(v) and 1 <= v <= 5, "an integer in 1..5"),
    ("task.test_fraction", lambda v: _number(v) and 0 < v < 1, "a share in (0, 1), e.g. 0.1"),
    ("task.split_seed", lambda v: _int(v) and v >= 0, "an integer >= 0"),
    ("model.dim", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("loss.n_negatives", lambda v: _int(v) and v >= 1, "an integer >= 1"),
    ("task.valid_fraction", lambda v: _number(v) and 0 <= v < 1, "a number in [0, 1)"),
    ("task.users_per_batch", lambda v: _int(v) and v >= 1, "an integer >= 1"),
]


def validate(cfg: DictConfig) -> None:
    """Check every rule of :data:`RULES` on the composed config.

    Raises:
        ConfigError: ``<key>=<value> is out of range: use <allowed>`` for the first bad value.
    """
    missing = object()
    for key, ok, allowed in RULES:
        value = OmegaConf.select(cfg, key, default=missing)
        if value is missing:
            continue
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
        if not ok(value):
            raise ConfigError(f"{key}={value} is out of range: use {allowed}")
    _check_together(cfg)


def _check_together(cfg: DictConfig) -> None:
    """Settings that are each in range but do not fit together."""
    n_items, least = OmegaConf.select(cfg, "dataset.n_items"), OmegaConf.select(cfg, "dataset.min_per_user")
    if _int(n_items) and _int(least) and least > n_items:
        raise ConfigError(f"dataset.min_per_user={least} exceeds dataset.n_items={n_items}: a user cannot have more "
                          "distinct items than the catalogue; lower min_per_user or raise n_items")
    valid, test = OmegaConf.select(cfg, "task.valid_fraction"), OmegaConf.select(cfg, "task.test_fraction")
    if _number(valid) and _number(test) and valid + test >= 1:
        raise ConfigError(f"task.valid_fraction={valid} and task.test_fraction={test} leave no training edges; keep "
                          "their sum below 1")
