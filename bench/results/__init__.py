"""Run results: the ``results.json`` schema (:class:`RunResult`), the files beside it, and
which overrides make a configuration. Lightning callbacks that write them live in
:mod:`bench.results.callbacks`, the one-run-per-folder lock in :mod:`bench.results.lock`;
:func:`finish_run` brings a folder to a completed run across interruptions."""

from bench.results.io import atomic_write_bytes, read_json, read_per_user, write_json, write_per_user
from bench.results.resumable import finish_run
from bench.results.schema import (
    CHECKPOINT_DIR,
    COMPLETED,
    FAILED,
    INTERRUPTED,
    PER_USER_FILE,
    RESULTS_FILE,
    RUN_CONFIG_FILE,
    RUNNING,
    RunResult,
    find_runs,
    override_key,
    variant_overrides,
    variant_suffix,
)

__all__ = ["CHECKPOINT_DIR", "COMPLETED", "FAILED", "INTERRUPTED", "PER_USER_FILE", "RESULTS_FILE",
           "RUN_CONFIG_FILE", "RUNNING", "RunResult", "atomic_write_bytes", "find_runs", "finish_run", "override_key",
           "read_json", "read_per_user", "variant_overrides", "variant_suffix", "write_json", "write_per_user"]
