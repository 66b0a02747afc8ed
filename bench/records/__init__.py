"""Records: what a run leaves and what is read back, at the bottom of the package (nothing here
imports a model, a loss, a task or Lightning).

- :mod:`~bench.records.schema`: ``results.json`` (:class:`RunResult`) and the files beside it;
- :mod:`~bench.records.configuration`: the one rule for which overrides make a configuration;
- :mod:`~bench.records.io`: atomic writes, per-user files, checkpoints read as data;
- :mod:`~bench.records.lock`: one run per folder; :mod:`~bench.records.folder`: the folder's life;
- :mod:`~bench.records.ledger`: a committed CSV row per finished run;
- :mod:`~bench.records.identity`: the identity of the exact data a run used;
- :mod:`~bench.records.provenance`: the code, machine and host a run ran on;
- :mod:`~bench.records.outcome`: what a tested model hands the recording callback.
"""

from bench.records.configuration import override_key, variant_overrides, variant_suffix
from bench.records.io import atomic_write_bytes, read_json, read_per_user, write_json, write_per_user
from bench.records.schema import (
    CHECKPOINT_DIR,
    COMPLETED,
    DIVERGED,
    FAILED,
    INTERRUPTED,
    PER_USER_FILE,
    RESULTS_FILE,
    RUN_CONFIG_FILE,
    RUNNING,
    RunResult,
    find_runs,
)

__all__ = ["CHECKPOINT_DIR", "COMPLETED", "DIVERGED", "FAILED", "INTERRUPTED", "PER_USER_FILE", "RESULTS_FILE",
           "RUN_CONFIG_FILE", "RUNNING", "RunResult", "atomic_write_bytes", "find_runs", "override_key",
           "read_json", "read_per_user", "variant_overrides", "variant_suffix", "write_json", "write_per_user"]
