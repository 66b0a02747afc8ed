"""The results of one run (``results.json``), written and read only through :class:`RunResult`,
(which overrides make a configuration: :mod:`bench.records.configuration`).

A run directory holds ``results.json`` (this schema), ``per_user_test.npz`` (per-user test
metrics, for paired tests), ``run_config.yaml``, ``checkpoints/`` and the loggers' files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.errors import BenchError
from bench.records.configuration import variant_overrides
from bench.records.io import read_json, read_per_user, write_json
from bench.records.layout import (  # noqa: F401  (the schema's names, read from here too)
    CHECKPOINT_DIR,
    COMPLETED,
    DIVERGED,
    FAILED,
    INTERRUPTED,
    PER_USER_FILE,
    RESULTS_FILE,
    RUN_ARTIFACTS,
    RUN_CONFIG_FILE,
    RUNNING,
    SWEEP_ID_ENV,
)


# -- the record ------------------------------------------------------------------------------
@dataclass
class RunResult:
    """Everything a run reports, as stored in ``results.json``.

    Attributes:
        status: "running", "completed", "failed" or "diverged".
        config: the resolved config.
        overrides: the command-line overrides that made the run.
        data: counts (users, items, interactions per split, evaluated and skipped users).
        best: ``{"epoch", "checkpoint", "val": {metric: value}}`` at the best validation.
        test: mean test metrics at the best checkpoint, ``{"ndcg@20": ...}``.
        ties: what tied scores did to the test metrics: the rule (``eval.ties``), the queries
            whose cut-offs split a tie group and each metric's [pessimistic, optimistic] mean
            (docs/evaluation.md#ties); empty for runs that predate it.
        per_edge: link prediction's per-edge test metrics, ``{"edges": E, "mrr": ..., "hit@20": ...}``:
            means over the E held-out (u, v) pairs, each undirected edge once from each end
            (docs/evaluation.md, "Link prediction: per-edge ranking"); empty for other tasks and
            for runs that predate it.
        sampled: the biased "1 positive + N sampled negatives" test metrics of older papers,
            ``{"negatives": N, "seed": s, "protocol": ..., "users": U, "short_users": ..., "mrr": ...,
            "hit@10": ..., "ndcg@10": ..., ...}`` (means over users; docs/evaluation.md, "Sampled
            metrics"); never part of ``test``; empty unless ``eval.sampled_negatives`` was set.
        history: one row per validation, ``{"epoch", "val/<metric>", "diag/<name>"}``.
        epochs_trained: epochs completed.
        per_user_test: file name of the per-user test metrics.
        timing_s: wall-clock seconds per phase: data, fit, test (each summed over the parts of a
            resumed run; a killed part's fit counts up to the checkpoint it resumed from) and
            total (from ``started_at`` to ``finished_at``, so with the down time of a resumed run).
        resumed_from: the checkpoint a resumed run continued from.
        device, host, versions: where and with what it ran (versions: python and the libraries).
        provenance: what exactly ran, on what: ``code`` ``{"commit", "dirty"}`` of the bench
            checkout (both None, with ``note``, when it is not a git repository), ``data_files``
            ``{name: sha256}`` of every data file read, ``data_identity`` (``sha256:<hex>`` of the
            data set as loaded and of the test split the task ranks: :mod:`bench.records.identity`),
            ``hardware`` ``{"cpu", "cpu_count", "gpu", "memory_gb"}``, ``digits`` (what the numbers'
            last digits depend on: :func:`bench.determinism.digits_record`); each absent in results
            written before it was recorded.
        started_at, finished_at: ISO times (UTC).
        sweep_id: the sweep that started it (``$BENCH_SWEEP_ID``), None outside a sweep.
        error, traceback: why a failed run failed.
        extra: keys of the file this version does not know (kept when rewritten).
        run_dir: the directory it was read from (not stored).
    """

    status: str = RUNNING
    config: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)
    test: dict[str, float] = field(default_factory=dict)
    ties: dict[str, Any] = field(default_factory=dict)
    per_edge: dict[str, Any] = field(default_factory=dict)
    sampled: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    epochs_trained: int | None = None
    per_user_test: str | None = None
    timing_s: dict[str, float] = field(default_factory=dict)
    resumed_from: str | None = None
    device: str | None = None
    host: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None
    sweep_id: str | None = None
    error: str | None = None
    traceback: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = field(default=None, compare=False)

    # -- reading and writing ----------------------------------------------------------------
    @classmethod
    def from_dict(cls, payload: dict[str, Any], run_dir: Path | None = None) -> RunResult:
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", "run_dir"}
        return cls(**{k: v for k, v in payload.items() if k in known},
                   extra={k: v for k, v in payload.items() if k not in known}, run_dir=run_dir)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("extra", "run_dir")}
        return {**out, **self.extra}

    @classmethod
    def read(cls, path: str | Path) -> RunResult:
        """The result in ``path`` (a run directory or its ``results.json``)."""
        path = Path(path)
        file = path / RESULTS_FILE if path.is_dir() else path
        if not file.is_file():
            raise BenchError(f"{path} holds no {RESULTS_FILE}; pass the output directory of a run")
        try:
            return cls.from_dict(read_json(file), run_dir=file.parent)
        except (OSError, ValueError, TypeError) as exc:
            raise BenchError(f"{file} is not a readable results file ({exc}); delete it or rerun that run") from exc

    @classmethod
    def read_or_new(cls, run_dir: str | Path) -> RunResult:
        """The result already in ``run_dir``, or an empty one (a new run)."""
        file = Path(run_dir) / RESULTS_FILE
        return cls.read(file) if file.is_file() else cls(run_dir=Path(run_dir))

    def write(self, run_dir: str | Path | None = None) -> Path:
        """Write ``results.json`` into ``run_dir`` (default: where it was read from), atomically."""
        target = Path(run_dir) if run_dir is not None else self.run_dir
        if target is None:
            raise ValueError("RunResult.write needs a run directory")
        self.run_dir = target
        write_json(target / RESULTS_FILE, self.to_dict())
        return target / RESULTS_FILE

    def load_per_user(self) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """(users (U,), {metric: (U,) float64}) of the test set, or None when not saved."""
        if self.run_dir is None:
            return None
        path = self.run_dir / Path(self.per_user_test or PER_USER_FILE).name  # never a file outside the folder
        return read_per_user(path) if path.is_file() else None

    def live_status(self) -> str:
        """:attr:`status`, except that a "running" run whose folder no live process holds (its
        lock is gone, or its process on this host is dead: killed) reads "interrupted"."""
        if self.status != RUNNING or self.run_dir is None:
            return self.status
        from bench.records.lock import holder_alive

        return RUNNING if holder_alive(self.run_dir) is not False else INTERRUPTED

    # -- what the run was --------------------------------------------------------------------
    def _name(self, group: str, default: str = "?") -> str:
        return str((self.config.get(group) or {}).get("name", default))

    @property
    def task(self) -> str:
        return self._name("task", "cf")

    @property
    def dataset(self) -> str:
        return self._name("dataset")

    @property
    def model(self) -> str:
        return self._name("model")

    @property
    def loss(self) -> str:
        return self._name("loss")

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    @property
    def paper(self) -> dict[str, float]:
        """The paper's values for this configuration (from a paper experiment), if any."""
        return dict(self.config.get("paper") or {})

    @property
    def monitor(self) -> str:
        """The validation metric that picks the best checkpoint (``ndcg@20``)."""
        return str((self.config.get("train") or {}).get("monitor", "ndcg@20"))

    @property
    def best_val(self) -> float | None:
        """The best validation value of :attr:`monitor` (the objective of sweepers)."""
        return (self.best.get("val") or {}).get(self.monitor)

    @property
    def best_checkpoint(self) -> Path | None:
        """The best checkpoint's path (stored relative to the run folder, so the folder can move).

        Raises:
            BenchError: the record points outside its folder (a run's files are its own).
        """
        path = self.best.get("checkpoint")
        if not path:
            return None
        if self.run_dir is None:
            return Path(path)
        full = Path(path) if Path(path).is_absolute() else self.run_dir / path
        if not full.resolve().is_relative_to(self.run_dir.resolve()):
            raise BenchError(f"{self.run_dir / RESULTS_FILE} names the best checkpoint {path}, outside its folder; "
                             "a run's files are its own: pass --checkpoint with a path you trust")
        return full

    @property
    def data_files(self) -> dict[str, str] | None:
        """``{file: sha256}`` of the data files the run read ({} for generated data), or None
        when its results predate provenance."""
        files = self.provenance.get("data_files")
        return dict(files) if isinstance(files, dict) else None

    @property
    def data_identity(self) -> str | None:
        """``sha256:<hex>`` of the exact data the run used (:mod:`bench.records.identity`), or None
        when its results predate it."""
        value = self.provenance.get("data_identity")
        return str(value) if value else None

    @property
    def digits(self) -> dict[str, Any]:
        """What the run's last digits depend on (:func:`bench.determinism.digits_record`; {} before it
        was recorded)."""
        value = self.provenance.get("digits")
        return dict(value) if isinstance(value, dict) else {}

    @property
    def job_overrides(self) -> list[str]:
        """The overrides, without Hydra's own settings."""
        return [o for o in self.overrides if not o.startswith("hydra")]

    @property
    def variant(self) -> list[str]:
        """The overrides that make this configuration (see :func:`variant_overrides`)."""
        return variant_overrides(self.overrides)


def find_runs(paths: Iterable[str | Path]) -> tuple[list[RunResult], list[str]]:
    """Every run under each path (a run directory, a ``results.json`` or any folder above
    run directories), whatever its status.

    Returns:
        (runs, notes): notes name the files that could not be read.
    """
    runs, notes = [], []
    for root in map(Path, paths):
        if not root.exists():
            raise BenchError(f"{root} does not exist; pass run or sweep directories (those holding {RESULTS_FILE})")
        files = [root] if root.is_file() else sorted(root.rglob(RESULTS_FILE), key=str)
        if not files:
            notes.append(f"no {RESULTS_FILE} under {root}")
        for file in files:
            try:
                runs.append(RunResult.read(file))
            except BenchError as exc:
                notes.append(str(exc))
    return runs, notes
