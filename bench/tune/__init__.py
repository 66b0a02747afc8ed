"""Tuning on validation with Optuna (>= 4): a search space from ``conf/search/<name>.yaml``, trials in
shared storage so several workers (processes here, jobs on a cluster) draw from one study and a
killed tuning picks up where it stopped, and hopeless trials pruned on their validation curve.

    python -m bench.tune paper_slk dataset=health loss=slk loss.tau_d=0.2 [--n-trials 30] [--workers 2]
        [--storage sqlite:///tuning/x.db | journal:tuning/x.log | postgresql://...] [--pruner median|none]

A search file:

    sampler: grid            # grid (every combination once) or tpe (seeded by the run's seed)
    n_trials: 6              # the budget (a grid's size when null)
    extends: paper           # another search whose params come first
    params:                  # override -> the values tried (a list) ...
      loss.tau_w: [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
      optimizer.lr: {low: 0.001, high: 0.1, log: true}   # ... or a range (TPE only)

The objective is the run's best **validation** ``train.monitor`` (NDCG@K), never a test metric.
Each trial is a run of its own under ``tuning/<study>/trial-<n>`` (its results.json as usual).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.composition import CONFIG_DIR
from bench.errors import ConfigError
from bench.strict_yaml import load_strict

SEARCH_DIR = Path(CONFIG_DIR) / "search"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Search:
    """A search space: ``params`` maps an override key to its values (a list) or a range (a dict)."""

    name: str
    sampler: str
    n_trials: int
    params: Mapping[str, Any]

    def grid(self) -> dict[str, list[Any]]:
        """The grid of a search whose every parameter is a list of values."""
        ranges = [k for k, v in self.params.items() if not isinstance(v, list)]
        if ranges:
            raise ConfigError(f"search {self.name}: a grid needs value lists, {', '.join(ranges)} is a range; "
                              "use sampler: tpe")
        return {k: list(v) for k, v in self.params.items()}


def known_searches() -> list[str]:
    return sorted(p.stem for p in SEARCH_DIR.glob("*.yaml"))


def load_search(name: str, seen: tuple[str, ...] = ()) -> Search:
    """``conf/search/<name>.yaml`` with the searches it extends merged under it.

    Raises:
        ConfigError: an unknown search (the known ones listed), a loop of ``extends``, a malformed entry.
    """
    path = SEARCH_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown search {name!r}; known: {', '.join(known_searches())} (conf/search/<name>.yaml)")
    if name in seen:
        raise ConfigError(f"search {name} extends itself through {' -> '.join(seen)}")
    spec = load_strict(path, f"search {name}") or {}
    unknown = set(spec) - {"sampler", "n_trials", "extends", "params"}
    if unknown:
        raise ConfigError(f"search {name}: unknown key(s) {', '.join(sorted(unknown))}; a search takes sampler, "
                          "n_trials, extends, params")
    base = load_search(spec["extends"], (*seen, name)) if spec.get("extends") else None
    params = {**(dict(base.params) if base else {}), **(spec.get("params") or {})}
    for key, values in params.items():
        listed = isinstance(values, list) and bool(values)
        ranged = isinstance(values, dict) and {"low", "high"} <= set(values)
        if not (listed or ranged):
            raise ConfigError(f"search {name}: params.{key} must be a list of values or {{low, high[, log]}}")
    sampler = str(spec.get("sampler") or (base.sampler if base else "tpe"))
    if sampler not in ("tpe", "grid"):
        raise ConfigError(f"search {name}: sampler={sampler}; use tpe or grid")
    search = Search(name, sampler, 0, params)
    # its own budget, else the one it extends, else a grid's size (every combination once)
    n_trials = spec.get("n_trials") or (base.n_trials if base else None) or \
        (_grid_size(search) if sampler == "grid" else 30)
    return Search(name, sampler, int(n_trials), params)


def _grid_size(search: Search) -> int:
    size = 1
    for values in search.grid().values():
        size *= len(values)
    return size


def suggest(trial: Any, search: Search) -> list[str]:
    """The trial's overrides (``key=value``), drawn from the search space."""
    out = []
    for key, values in search.params.items():
        if isinstance(values, list):
            value = trial.suggest_categorical(key, values)
        elif isinstance(values["low"], int) and isinstance(values["high"], int) and not values.get("log"):
            value = trial.suggest_int(key, values["low"], values["high"])
        else:
            value = trial.suggest_float(key, float(values["low"]), float(values["high"]), log=bool(values.get("log")))
        out.append(f"{key}={value}")
    return out
