"""Where report runs come from: run/sweep directories (read as
:class:`~bench.records.RunResult`) or a W&B project.

Each source yields :class:`RunRecord` s with the same fields, so the statistics never
care where a run was stored; :func:`assign_labels` is the one grouping of runs into
configurations (rows), used by the report and the seed summary alike.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.errors import BenchError
from bench.losses.families import paper_name
from bench.records import (
    COMPLETED,
    PER_USER_FILE,
    RunResult,
    read_per_user,
    variant_overrides,
)
from bench.records.identity import short
from bench.records.ledger import kept_per_user

log = logging.getLogger(__name__)

PerUser = tuple[np.ndarray, dict[str, np.ndarray]]
#: hex digits of a data identity compared between records (a ledger keeps 16)
IDENTITY_DIGITS = 16
#: how the module logs link prediction's per-edge metrics after ``test/`` (``test/edge_mrr``)
EDGE_LOG_PREFIX = "edge_"
#: and the biased sampled-negatives metrics (``test/sampled_hit@10``)
SAMPLED_LOG_PREFIX = "sampled_"


@dataclass
class RunRecord:
    """One completed run, as the report needs it.

    Attributes:
        source: its directory or W&B path (for messages).
        task, dataset, model, loss: the table (task, dataset, model) and row (loss) it belongs to.
        variant: the overrides that tell it apart from other configurations of the same
            loss in its table (``loss.tau=0.1``); set by :func:`assign_labels`.
        seed: the run seed (paired tests match runs by it).
        test: mean test metrics, ``{"ndcg@20": ...}``.
        per_edge: link prediction's per-edge test metrics, ``{"mrr": ..., "hit@20": ...}`` (means
            over held-out edges; from a results file also ``"edges"``, their number); empty for
            other tasks.
        sampled: the biased "1 positive + N sampled negatives" test metrics, ``{"hit@10": ...,
            "ndcg@10": ..., "mrr": ...}`` (from a results file also ``negatives``, ``seed``, ``users``,
            ``short_users``); empty unless the run set ``eval.sampled_negatives``. Never in ``test``.
        ref: test metrics under the SL@K reference code's protocol (only training items masked),
            ``{"ndcg@20": ...}``, from a run ledger's ``ref/`` columns (a study's ``ref:`` re-test
            writes them); empty otherwise.
        history: validation rows ``{"epoch": e, "val/ndcg@20": ...}``.
        paper: the paper's values for this configuration (``paper`` config node), if any.
        overrides: the command-line overrides that made it.
        load_per_user: returns (users (U,), {metric: (U,) float64}) or None when not saved.
        finished: when it was written (seconds since the epoch; the newest of repeated runs wins).
        k: the loss's K (``loss.k``) when it has one, for the paper's name (SL@20).
        data_files: ``{file: sha256}`` of the data it read, None when its results do not say
            (written before provenance was recorded, or read from W&B, or from a ledger).
        data_digest: a ledger row's digest of those files (:func:`bench.records.ledger.data_digest`),
            "" for records read from elsewhere.
        data_identity: the first 16 hex digits of the identity of the exact data the run used
            (:mod:`bench.records.identity`), "" when not recorded (older runs, W&B).
        extra: a ledger row's other columns (``commit``, ``best_epoch``, ``train_epoch_s``, ``curve/...``,
            ``diag/...``), {} for records read from elsewhere.
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
    k: int | None = None
    data_files: dict[str, str] | None = None
    data_digest: str = ""
    data_identity: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    per_edge: dict[str, float] = field(default_factory=dict)
    sampled: dict[str, float] = field(default_factory=dict)
    ref: dict[str, float] = field(default_factory=dict)

    @property
    def table(self) -> tuple[str, str, str]:
        return self.task, self.dataset, self.model

    @property
    def label(self) -> str:
        return f"{self.loss} {self.variant}".strip()

    @property
    def name(self) -> str:
        """The row as the paper names it: ``SL@20``, ``SL loss.tau=0.1``."""
        return f"{paper_name(self.loss, self.k)} {self.variant}".strip()


def _record(res: RunResult, source: str, load_per_user: Callable[[], PerUser | None],
            finished: float = 0.0) -> RunRecord:
    return RunRecord(
        source=source, task=res.task, dataset=res.dataset, model=res.model, loss=res.loss, seed=res.seed,
        test={k: float(v) for k, v in res.test.items() if v is not None}, history=list(res.history),
        paper=res.paper, overrides=res.job_overrides, load_per_user=load_per_user, finished=finished,
        k=loss_k(res.config), data_files=res.data_files, data_identity=short(res.data_identity, IDENTITY_DIGITS),
        per_edge={k: float(v) for k, v in res.per_edge.items() if isinstance(v, int | float)},
        sampled={k: float(v) for k, v in res.sampled.items() if isinstance(v, int | float) and not isinstance(v, bool)})


def loss_k(config: dict[str, Any]) -> int | None:
    k = (config.get("loss") or {}).get("k")
    return int(k) if isinstance(k, int | float) and not isinstance(k, bool) and k > 0 else None


def from_results(runs: Iterable[RunResult]) -> tuple[list[RunRecord], list[str]]:
    """The completed runs among ``runs`` as records; notes name the others (failed, running)."""
    records, notes = [], []
    for res in runs:
        where = str(res.run_dir)
        if res.status != COMPLETED:
            notes.append(f"{where}: {res.live_status()}" + (f" ({res.error})" if res.error else ""))
            continue
        mtime = (res.run_dir / "results.json").stat().st_mtime if res.run_dir else 0.0
        records.append(_record(res, where, res.load_per_user, mtime))
    return records, notes


def from_ledger(rows: Iterable[Mapping[str, object]], task: str, dataset: str, model: str, loss: str,
                local: Mapping[int, RunResult] | None = None, paper: Mapping[str, float] | None = None,
                k: int | None = None, source: str = "ledger", ledger: Path | None = None) -> list[RunRecord]:
    """Records from run-ledger rows (:mod:`bench.records.ledger`; one configuration), so the report's
    seed intervals and seed-paired tests cover seeds whose run folders are gone.

    ``local`` maps a seed to its run folder's result where it is still here: when it is the
    ledger's run (same finish time) its per-user file backs the per-user tests; otherwise the
    per-user values the ledger file ``ledger`` kept for the row do (:func:`~bench.records.ledger.kept_per_user`),
    and without those the record has none and the per-user tests are left out.
    """
    records = []
    for row in rows:
        seed = int(row["seed"])  # type: ignore[call-overload]
        values = {c: float(v) for c, v in row.items() if isinstance(v, int | float) and not np.isnan(float(v))}

        def family(prefix: str, values: dict[str, float] = values) -> dict[str, float]:
            return {c[len(prefix):]: v for c, v in values.items() if c.startswith(prefix)}

        res = (local or {}).get(seed)
        same = res is not None and res.status == COMPLETED and (res.finished_at or "") == str(row.get("finished_at"))
        records.append(RunRecord(
            source=str(res.run_dir) if same and res is not None else f"{source} seed {seed}", task=task,
            dataset=dataset, model=model, loss=loss, seed=seed, test=family("test/"), paper=dict(paper or {}),
            overrides=str(row.get("setting", "")).split(), k=k, per_edge=family("edge/"), sampled=family("sampled/"),
            ref=family("ref/"), data_digest=str(row.get("data") or ""), finished=_timestamp(row.get("finished_at")),
            data_identity=str(row.get("data_id") or "")[:IDENTITY_DIGITS], extra=dict(row),
            load_per_user=res.load_per_user if same and res is not None
            else partial(kept_per_user, ledger, row) if ledger is not None else (lambda: None)))
    return records


def from_wandb(project: str, filters: dict[str, Any] | None = None,
               api: Any = None) -> tuple[list[RunRecord], list[str]]:
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
        # per-edge (test/edge_<metric>) and sampled (test/sampled_<metric>) metrics are not per-user metrics
        per_edge = {k[len(EDGE_LOG_PREFIX):]: float(test.pop(k)) for k in list(test) if k.startswith(EDGE_LOG_PREFIX)}
        sampled = {k[len(SAMPLED_LOG_PREFIX):]: float(test.pop(k)) for k in list(test)
                   if k.startswith(SAMPLED_LOG_PREFIX)}
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
        res = RunResult(status=COMPLETED, config=cfg, test=test, per_edge=per_edge, sampled=sampled, history=history,
                        overrides=_group_overrides(run, cfg))
        finished = getattr(run, "heartbeat_at", None) or getattr(run, "created_at", None)
        records.append(_record(res, f"{project}/{run.id}", _wandb_per_user(run), _timestamp(finished)))
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
            with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:  # read, then removed
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
    notes = split_by_identity(records)
    by_table: dict[tuple, list[RunRecord]] = {}
    for r in records:
        by_table.setdefault((r.table, r.loss), []).append(r)
    for group in by_table.values():
        sets = [set(variant_overrides(r.overrides)) for r in group]
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
    return notes + check_same_data(records)


def split_by_identity(records: list[RunRecord]) -> list[str]:
    """Give the runs of one data set name that used different data (by identity: a generator's
    settings, a filter, a split) data set names of their own, ``synthetic [data 3f2a9c01]``, so
    that each identity is a table of its own and no paired test ever pairs across identities.

    Returns:
        a note per data set name that was split.
    """
    notes = []
    by_name: dict[str, set[str]] = {}
    for r in records:
        if r.data_identity:
            by_name.setdefault(r.dataset, set()).add(r.data_identity)
    for name, identities in sorted(by_name.items()):
        if len(identities) < 2:
            continue
        for r in records:
            if r.dataset == name and r.data_identity:
                r.dataset = f"{name} [data {r.data_identity[:8]}]"
        notes.append(f"data set '{name}' was run on {len(identities)} different data (identities "
                     f"{', '.join(sorted(i[:8] for i in identities))}: other generator, filter or split settings); "
                     "each is reported as a table of its own, and no run is paired across them")
    return notes


def check_same_data(records: list[RunRecord]) -> list[str]:
    """Refuse runs of one data set name that read different data files (by content: the
    set of SHA-256 digests, whatever the files were called or where they lay). Ledger rows carry
    one digest of those files instead, and are checked against each other by it.

    Returns:
        a note on the runs that carry no data hashes (pooled unchecked).
    Raises:
        BenchError: naming the data set, a file that differs with its hashes, and the two runs.
    """
    first: dict[str, tuple[RunRecord, dict[str, str]]] = {}
    first_digest: dict[str, RunRecord] = {}
    unchecked = 0
    # runs with an identity are apart already (split_by_identity); they are the reference the runs
    # without one (from before it was recorded) are checked against, by their files
    for r in sorted(records, key=lambda r: r.source):
        if r.data_identity and r.data_files is not None:
            first.setdefault(r.dataset, (r, r.data_files))
    for r in sorted(records, key=lambda r: r.source):
        if r.data_identity:
            continue
        if r.data_files is None and r.data_digest:  # ledger rows: checked against each other
            ref = first_digest.setdefault(r.dataset, r)
            if ref.data_digest != r.data_digest:
                raise BenchError(f"data set '{r.dataset}' was read as data {ref.data_digest} in {ref.source} and as "
                                 f"{r.data_digest} in {r.source} (ledger digests of the files' SHA-256); runs on "
                                 "different data cannot be pooled: rerun them on the same data, or report them "
                                 "separately (one bench.report call each)")
            continue
        if r.data_files is None:
            unchecked += 1
            continue
        ref, ref_files = first.setdefault(r.dataset, (r, r.data_files))
        mine, theirs = set(r.data_files.values()), set(ref_files.values())
        if mine != theirs:
            raise BenchError(f"data set '{r.dataset}' was read from different files: "
                             f"{_file(ref_files, theirs - mine)} in {ref.source}, {_file(r.data_files, mine - theirs)} "
                             f"in {r.source}; runs on different data cannot be pooled: rerun them on the same data, "
                             "or report them separately (one bench.report call each)")
    if not unchecked:
        return []
    return [f"{unchecked} run(s) record no data hashes (results from before provenance, or from W&B): "
            "pooled without checking that they read the same data"]


def _file(files: dict[str, str], digests: set[str]) -> str:
    """The first file whose digest is in ``digests``, with its short digest."""
    name = next((n for n in sorted(files) if files[n] in digests), None)
    return f"{name} (sha256 {files[name][:12]})" if name is not None else "no such file"
