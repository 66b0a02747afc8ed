"""Experiment configs with per-loss settings (``conf/experiment/paper/*``).

A paper table tunes each loss separately, so an experiment such as
``+experiment=paper/table2_mf_health`` holds, under ``per_loss.<loss name>``, the values
to ``set`` (dotted config keys) and the ``paper``'s test metrics. The chosen loss's
entry is applied after composition; a value the command line (or a sweeper) sets
explicitly wins. The entry's ``paper`` values stay in the config (and so in
``results.json``), where ``bench.report`` reads them.
"""

from __future__ import annotations

from collections.abc import Iterable

from omegaconf import DictConfig, OmegaConf, open_dict

from bench.errors import ConfigError

PER_LOSS = "per_loss"


def _override_keys(overrides: Iterable[str]) -> set[str]:
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}


def apply_per_loss(cfg: DictConfig, overrides: Iterable[str] = ()) -> DictConfig:
    """Apply ``cfg.per_loss[cfg.loss.name]`` in place (no-op without ``per_loss``).

    Args:
        cfg: the composed config.
        overrides: the command-line overrides (``key=value``); their keys are not touched.
    Raises:
        ConfigError: the experiment has no settings for the chosen loss.
    """
    table = cfg.get(PER_LOSS)
    if table is None:
        return cfg
    name = cfg.loss.name
    if name not in table:
        raise ConfigError(f"this experiment has the paper's settings for loss={', '.join(sorted(table))}, not for "
                          f"loss={name}; pick one of those, or add {PER_LOSS}.{name} to the experiment's file")
    entry = table[name]
    explicit = _override_keys(overrides)
    with open_dict(cfg):
        for key, value in (entry.get("set") or {}).items():
            if key in explicit:
                continue
            if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
                raise ConfigError(f"{PER_LOSS}.{name}.set sets {key}, which the config does not have; "
                                  "fix the experiment's file")
            OmegaConf.update(cfg, key, value, merge=False)
        cfg.paper = entry.get("paper") or {}
        del cfg[PER_LOSS]
    return cfg
