"""The ``${bench_...:}`` resolvers that conf/ uses; registered once, on import (by the app)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from bench.console import output_is_terminal
from bench.loggers import run_variant
from bench.parallel import parallel_jobs

RESOLVERS: dict[str, Callable[..., Any]] = {
    # conf/logger/wandb.yaml: seeds of one configuration share a W&B group, and a sweep over
    # loss.tau does not pool different taus into one
    "bench_variant": lambda: run_variant(),
    # conf/hydra/launcher/parallel.yaml: one job per GPU, else half the CPU cores
    "bench_parallel_jobs": parallel_jobs,
    # conf/trainer/default.yaml: a progress bar at a terminal, one log line per epoch otherwise
    "bench_terminal": output_is_terminal,
    # conf/config.yaml: the optimizer's foreach update unless fused is asked for (torch refuses both)
    "bench_not": lambda value: not value,
}

for _name, _fn in RESOLVERS.items():
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _fn)
