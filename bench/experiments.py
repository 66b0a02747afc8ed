"""Experiment configs with per-loss settings (``conf/experiment/paper/*``).

A paper table tunes each loss separately, so an experiment such as
``+experiment=paper/table2_mf_health`` holds, under ``per_loss.<loss name>``, the values
to ``set`` (dotted config keys) and the ``paper``'s test metrics. The chosen loss's
entry is applied after composition; a value the command line (or a sweeper) sets
explicitly wins. The entry's ``paper`` values stay in the config (and so in
``results.json``), where ``bench.report`` reads them.

A loss the paper tunes in several forms (LambdaLoss and its sampled-rank "-S" variant) lists
them under the entry's ``variants``: each has a ``when`` (dotted keys and the values that
select it, e.g. ``{loss.ranks: sampled}``, as set on the command line or by the loss's
defaults) and its own ``set`` and ``paper``, applied over the entry's; a variant without ``paper``
values reports against the entry's (LLPAUC as IR-Benchmark runs it produced the same row).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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
    chosen = [v for v in entry.get("variants") or [] if _matches(cfg, v.get("when") or {})]
    if len(chosen) > 1:
        raise ConfigError(f"{PER_LOSS}.{name}: {len(chosen)} variants match this run; fix the experiment's file")
    explicit = _override_keys(overrides)
    settings = {**(entry.get("set") or {}), **((chosen[0].get("set") or {}) if chosen else {})}
    with open_dict(cfg):
        for key, value in settings.items():
            if key in explicit:
                continue
            if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
                raise ConfigError(f"{PER_LOSS}.{name}.set sets {key}, which the config does not have; "
                                  "fix the experiment's file")
            OmegaConf.update(cfg, key, value, merge=False)
        # a variant without paper values of its own (a reference code's form of the same row) takes the entry's
        cfg.paper = ((chosen[0].get("paper") if chosen else None) or entry.get("paper")) or {}
        del cfg[PER_LOSS]
    return cfg


def _matches(cfg: DictConfig, when: Mapping[Any, Any]) -> bool:
    """Whether every dotted key of ``when`` holds its value in ``cfg``."""
    return all(OmegaConf.select(cfg, str(key), default="__missing__") == value for key, value in when.items())
