"""Where report runs come from: run/sweep directories or a W&B project.

Each source yields :class:`RunRecord` s with the same fields, so the statistics never
care where a run was stored.
"""

from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bench.errors import BenchError
from bench.results import PER_USER_FILE, RESULTS_FILE, read_json, read_per_user

log = logging.getLogger(__name__)

#: overrides that place a run in a table (dataset x model) or a row (loss), tell seeds apart or
#: do not change results; any other override (``loss.tau=0.1``) makes a row of its own
STRUCTURAL_KEYS = frozenset({"dataset", "model", "task", "loss", "seed", "experiment", "logger", "output_dir",
                             "data_dir", "cache_dir", "resume"})

PerUser = tuple[np.ndarray, dict[str, np.ndarray]]


@dataclass
class RunRecord:
    """One completed run, as the report needs it.

    Attributes:
        source: its directory or W&B path (for messages).
        task, dataset, model, loss: the table (task, dataset, model) and row (loss) it belongs to.
        variant: the overrides besides those that tell it apart from other configurations
            of the same loss (``loss.tau=0.1``); set by :func:`assign_labels`.
        seed: the run seed (paired tests match runs by it).
        test: mean test metrics, ``{"ndcg@20": ...}``.
        history: validation rows ``{"epoch": e, "val/ndcg@20": ...}``.
        paper: the paper's values for this configuration (``paper`` config node), if any.
        overrides: the command-line overrides that made it.
        load_per_user: returns (users (U,), {metric: (U,) float64}) or None when not saved.
        finished: when it was written (seconds since the epoch; the newest of repeated runs wins).
    """

    source: str
    task: str
    dataset: str
    model: str
    loss: str
    seed: int
    test: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)
    paper: dict[str, float] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    load_per_user: Callable[[], PerUser | None] = lambda: None
    finished: float = 0.0
    variant: str = ""

    @property
    def table(self) -> tuple[str, str, str]:
        return self.task, self.dataset, self.model

    @property
    def label(self) -> str:
        return f"{self.loss} {self.variant}".strip()


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _record_from_results(res: dict[str, Any], source: str, load_per_user: Callable[[], PerUser | None],
                         finished: float = 0.0) -> RunRecord:
    cfg = res.get("config") or {}
    return RunRecord(
        source=source, task=str((cfg.get("task") or {}).get("name", "cf")),
        dataset=str((cfg.get("dataset") or {}).get("name", "?")), model=str((cfg.get("model") or {}).get("name", "?")),
        loss=str((cfg.get("loss") or {}).get("name", "?")), seed=int(cfg.get("seed", 0)),
        test={k: float(v) for k, v in (res.get("test") or {}).items() if v is not None},
        history=list(res.get("history") or []), paper=dict(cfg.get("paper") or {}),
        overrides=[o for o in res.get("overrides", []) if not o.startswith("hydra")], load_per_user=load_per_user,
        finished=finished)


def from_directories(paths: Iterable[Path]) -> tuple[list[RunRecord], list[str]]:
    """Completed runs under each path (a run directory or any folder above run directories).

    Returns:
        (records, notes): notes name the runs left out (failed, running, unreadable).
    """
    records, notes = [], []
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise BenchError(f"{root} does not exist; pass run or sweep directories (those holding {RESULTS_FILE})")
        files = [root] if root.is_file() else sorted(root.rglob(RESULTS_FILE), key=str)
        if not files:
            notes.append(f"no {RESULTS_FILE} under {root}")
        for path in files:
            try:
                res = read_json(path)
            except (OSError, ValueError) as exc:
                notes.append(f"{path}: unreadable ({exc})")
                continue
            if res.get("status") != "completed":
                notes.append(f"{path.parent}: {res.get('status', 'unknown')}"
                             + (f" ({res['error']})" if res.get("error") else ""))
                continue
            per_user = path.parent / res.get("per_user_test", PER_USER_FILE)
            records.append(_record_from_results(res, str(path.parent), _npz_loader(per_user), path.stat().st_mtime))
    return records, notes


def _npz_loader(path: Path) -> Callable[[], PerUser | None]:
    return lambda: read_per_user(path) if path.is_file() else None


def from_wandb(project: str, filters: dict[str, Any] | None = None, api: Any = None) -> tuple[list[RunRecord], list[str]]:
    """Finished training runs of a W&B project (``ENTITY/PROJECT``), optionally filtered
    (MongoDB-style, e.g. ``{"config.dataset.name": "health"}``). Per-user vectors are read
    from the run's ``per_user_test.npz`` file when it was uploaded."""
    if api is None:
        import wandb

        api = wandb.Api()
    query = {"jobType": "train", "state": "finished", **(filters or {})}
    records, notes = [], []
    for run in api.runs(project, filters=query):
        summary = dict(run.summary)
        test = {k[5:]: v for k, v in summary.items() if k.startswith("test/") and isinstance(v, (int, float))}
        if not test:
            notes.append(f"{project}/{run.id}: no test/* metrics in its summary")
            continue
        cfg = dict(run.config)
        history = []
        try:
            for row in run.scan_history():
                vals = {k: v for k, v in row.items() if k.startswith("val/") and v is not None}
                if vals and row.get("epoch") is not None:
                    history.append({"epoch": int(row["epoch"]), **vals})
        except Exception as exc:  # the history is for plots only
            notes.append(f"{project}/{run.id}: no history ({exc})")
        res = {"config": cfg, "test": test, "history": history, "overrides": _group_overrides(run, cfg)}
        finished = getattr(run, "heartbeat_at", None) or getattr(run, "created_at", None)
        records.append(_record_from_results(res, f"{project}/{run.id}", _wandb_per_user(run), _timestamp(finished)))
    return records, notes


def _group_overrides(run: Any, cfg: dict) -> list[str]:
    """The configuration overrides a W&B run's group names after ``dataset-model-loss``
    (see ``bench.loggers.run_variant``): ``-loss.tau=0.1-model.dim=32`` or a digest."""
    prefix = "-".join(str((cfg.get(k) or {}).get("name", "")) for k in ("dataset", "model", "loss"))
    group = str(getattr(run, "group", "") or "")
    if not group.startswith(prefix):
        return []
    return [o for o in re.split(r"-(?=[A-Za-z_][\w.@]*=)", group[len(prefix):].lstrip("-")) if o]


def _timestamp(value: Any) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _wandb_per_user(run: Any) -> Callable[[], PerUser | None]:
    def load() -> PerUser | None:
        try:
            tmp = tempfile.mkdtemp(prefix="bench-report-")
            run.file(PER_USER_FILE).download(root=tmp, replace=True)
            return read_per_user(Path(tmp) / PER_USER_FILE)
        except Exception as exc:
            log.info("%s: no per-user file (%s)", run.id, exc)
            return None

    return load


def assign_labels(records: list[RunRecord]) -> list[str]:
    """Set each record's ``variant`` (the overrides that set it apart within its table and
    loss) and drop repeated (configuration, seed) runs, keeping the newest.

    Returns notes on what was dropped.
    """
    notes = []
    by_table: dict[tuple, list[RunRecord]] = {}
    for r in records:
        by_table.setdefault((r.table, r.loss), []).append(r)
    for group in by_table.values():
        sets = [{o for o in r.overrides if _key(o) not in STRUCTURAL_KEYS and not _key(o).startswith("logger.")}
                for r in group]
        common = set.intersection(*sets) if sets else set()
        for r, s in zip(group, sets):
            r.variant = " ".join(sorted(s - common))
    seen: dict[tuple, RunRecord] = {}
    for r in sorted(records, key=lambda r: -r.finished):
        key = (r.table, r.label, r.seed)
        if key in seen:
            notes.append(f"{r.source}: seed {r.seed} of {r.label} also in the newer {seen[key].source}; left out")
            continue
        seen[key] = r
    records[:] = [r for r in records if seen[(r.table, r.label, r.seed)] is r]
    return notes
