"""A run ledger: one CSV row per completed run, small enough to commit beside a study's summary.

A paper-scale cell (five Gowalla seeds at over an hour each on two CPU cores) outlives the
machine it started on, and run folders (checkpoints, per-user files) are never committed. The
ledger keeps what the cell's summary needs from every finished run: its seed, the exact setting
(the overrides that made it), the data it read, the code it ran, and its test metrics. A later
session on another machine adds the seeds it runs to the same file, and the summary pools them.

Rows are keyed by (setting, seed): a run the ledger already holds replaces its row. A ledger holds
one data version, and by default one setting (a cell's seeds; a tuning ledger holds several); a run
of another is refused in one line, so seeds of different configurations are never pooled by accident.

A one-setting ledger can also keep a few per-user test metrics of each run
(:func:`keep_per_user`: ``<ledger stem>.per_user/seed<k>.npz``, kilobytes), so per-user tests between
two configurations still work when their seeds ran on different machines.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.determinism import digits_key
from bench.errors import BenchError
from bench.records.configuration import canonical_setting, override_key, setting_of
from bench.records.identity import short
from bench.records.io import atomic_write_bytes
from bench.records.schema import RunResult

LEDGER_FILE = "runs.csv"
METRIC_PREFIXES = ("val/", "test/", "edge/", "sampled/", "ref/", "diag/", "curve/")
#: the sampled protocol's means kept besides its @K metrics (its counts and seeds are not metrics)
SAMPLED_METRICS_KEPT = frozenset({"mrr"})
#: the columns before the metrics; metric columns are ``val/<metric>`` (the best validation values,
#: which pick a tuned setting), ``test/<metric>``, ``edge/<metric>`` (link prediction's per-edge
#: protocol), ``sampled/<metric>`` (the biased sampled protocol), ``diag/<name>`` (the loss's
#: diagnostics at the best validation, e.g. SL@K's Theorem 3.2 check) and any caller's extras
#: (``ref/<metric>``: the same checkpoint under another test protocol; ``curve/<name>``: a point of the
#: training curve, e.g. the validation NDCG@20 at epoch 50)
#: (``fit_s``: the fit's wall seconds, validation included; ``train_epoch_s``: the median training epoch's)
TIMING_COLUMNS = ("fit_s", "train_epoch_s")
#: ``device``: what the run trained on (``cpu``, or ``cuda:0 NVIDIA H200``), without which neither its
#: timings nor a difference in its metrics can be read (GPU kernels do not reproduce the CPU's digits);
#: ``data_id``: the identity of the exact data (:mod:`bench.records.identity`, 16 hex digits: the
#: splits, not only the files, so a generator's or a filter's settings count); ``digits``: what its
#: last digits depend on (:func:`bench.determinism.digits_key`: torch, device, CPU kernels, threads).
#: Both are blank in rows written before they were recorded.
ID_COLUMNS = ("seed", "setting", "data", "data_id", "commit", "dirty", "finished_at", "epochs_trained",
              "best_epoch", *TIMING_COLUMNS, "device", "digits")


def data_digest(res: RunResult) -> str:
    """12 hex digits naming the data files the run read and their SHA-256 ("" when unrecorded)."""
    files = res.data_files
    if not files:
        return ""
    text = "\n".join(f"{Path(name).name}={digest}" for name, digest in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def ledger_row(res: RunResult, extra: Mapping[str, float] | None = None) -> dict[str, object]:
    """One completed run as a ledger row: its identity, then its best validation, test, per-edge
    and sampled-protocol metrics and the loss's diagnostics logged with the best validation
    (:data:`ID_COLUMNS`), then ``extra`` (column -> value) as given."""
    code = res.provenance.get("code") or {}
    row: dict[str, object] = {
        "seed": res.seed,
        "setting": setting_of(res.overrides),
        "data": data_digest(res),
        "data_id": short(res.data_identity, 16),
        "commit": code.get("commit") or "",
        "dirty": code.get("dirty") if code.get("dirty") is not None else "",
        "finished_at": res.finished_at or "",
        "epochs_trained": res.epochs_trained if res.epochs_trained is not None else "",
        "best_epoch": res.best.get("epoch", ""),
        "fit_s": round(float(res.timing_s["fit"]), 1) if "fit" in res.timing_s else "",
        "train_epoch_s": round(float(res.timing_s["train_epoch_median"]), 2)
        if "train_epoch_median" in res.timing_s else "",
        "device": device_of(res),
        "digits": digits_key(res.digits),
    }
    row.update({f"val/{m}": float(v) for m, v in sorted((res.best.get("val") or {}).items())})
    row.update({f"test/{m}": float(v) for m, v in sorted(res.test.items())})
    row.update({f"edge/{m}": float(v) for m, v in sorted(res.per_edge.items()) if m != "edges"})
    row.update({f"sampled/{m}": float(v) for m, v in sorted(res.sampled.items()) if m in SAMPLED_METRICS_KEPT
                or "@" in m})
    at_best = next((h for h in res.history if h.get("epoch") == res.best.get("epoch")), {})
    row.update({k: float(v) for k, v in sorted(at_best.items()) if k.startswith("diag/")})
    row.update(dict(extra or {}))
    return row


def device_of(res: RunResult) -> str:
    """``cpu``, ``cuda:0 NVIDIA H200`` (the GPU's name from the run's hardware record), or ""."""
    gpu = (res.provenance.get("hardware") or {}).get("gpu")
    return " ".join(str(x) for x in (res.device, gpu) if x)


def read_ledger(path: Path) -> list[dict[str, object]]:
    """The ledger's rows ([] when the file does not exist), numbers as int / float."""
    if not path.exists():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise BenchError(f"{path}, line {line}: not UTF-8 text (byte {exc.start}); this is no run ledger: move it "
                         "aside") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [c for c in ("seed", "setting") if c not in (reader.fieldnames or [])]
        if missing:
            raise BenchError(f"{path} is not a run ledger (no {', '.join(missing)} column); move it aside")
        rows = []
        for raw in reader:
            line = reader.line_num
            if None in raw or None in raw.values():  # more fields than the header names, or fewer
                raise BenchError(f"{path}, line {line}: {len(reader.fieldnames or [])} columns in the header, another "
                                 "number on this row; fix or delete that row")
            try:
                rows.append({k: _number(k, v) for k, v in raw.items()})
            except ValueError as exc:
                raise BenchError(f"{path}, line {line}: {exc}; fix or delete that row") from None
    except csv.Error as exc:
        # the reader fails before it counts the line it could not read
        raise BenchError(f"{path}, line {reader.line_num + 1}: not a CSV row ({exc}); fix or delete that row") from None
    return rows


def _number(column: str, text: str | None) -> object:
    if column == "seed":
        return int(text or "")
    if column.startswith(METRIC_PREFIXES) or column in TIMING_COLUMNS:
        return float(text) if text not in (None, "") else math.nan
    return text if text is not None else ""


def update_ledger(path: Path, new_rows: Iterable[Mapping[str, object]], one_setting: bool = True
                  ) -> list[dict[str, object]]:
    """Add ``new_rows`` to the ledger at ``path`` (a row of a (setting, seed) already there replaces
    it), write it back sorted by setting and seed, and return every row as :func:`read_ledger` reads it.

    Raises:
        BenchError: a new row's data (or, with ``one_setting``, its setting) differs from the ledger's.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # runs finishing together (a study's lanes sharing a ledger) each read, add and write:
    # the lock (on the folder: no lock file is left beside a committed ledger) makes that one step, so
    # no finished run's row is lost to another's write
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        return _update_ledger(path, new_rows, one_setting)
    finally:
        os.close(folder)  # closing releases the lock


def _update_ledger(path: Path, new_rows: Iterable[Mapping[str, object]], one_setting: bool
                   ) -> list[dict[str, object]]:
    rows = {_key(r): dict(r) for r in read_ledger(path)}
    for new in new_rows:
        for key in ("setting", "data", "data_id") if one_setting else ("data", "data_id"):
            spell = canonical_setting if key == "setting" else str
            held = {spell(str(r[key])) for r in rows.values() if r.get(key) not in (None, "")}
            if new.get(key) not in (None, "") and held and spell(str(new[key])) not in held:
                raise BenchError(
                    f"{path} holds runs with {key} {sorted(held)[0]!r}, but seed {new['seed']} ran with "
                    f"{new[key]!r}: pool only runs of one configuration on the same data; write this one "
                    "to another folder (--ledger) or move the old ledger aside")
        rows[_key(new)] = dict(new)
    ordered = [rows[k] for k in sorted(rows)]
    columns = list(ID_COLUMNS)
    for r in ordered:
        columns += [c for c in r if c not in columns]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(ordered)
    tmp.replace(path)
    return read_ledger(path)


def _key(row: Mapping[str, object]) -> tuple[str, int]:
    return canonical_setting(str(row.get("setting", ""))), int(row["seed"])  # type: ignore[call-overload]


def find_row(rows: Iterable[Mapping[str, object]], overrides: Iterable[str]) -> Mapping[str, object] | None:
    """The row of the run ``overrides`` would make (same setting, same seed), if the ledger holds it."""
    overrides = list(overrides)
    seeds = [int(o.split("=", 1)[1]) for o in overrides if override_key(o) == "seed"]
    want = (canonical_setting(setting_of(overrides)), seeds[-1] if seeds else 0)
    return next((r for r in rows if _key(r) == want), None)


def per_user_path(ledger: Path, seed: int) -> Path:
    """Where a one-setting ledger keeps seed ``seed``'s per-user test metrics."""
    return ledger.with_name(ledger.stem + ".per_user") / f"seed{seed}.npz"


def keep_per_user(ledger: Path, res: RunResult, metrics: Sequence[str]) -> Path | None:
    """Copy ``metrics`` of the completed run's per-user test file beside its ledger row
    (:func:`per_user_path`), stamped with its finish time, so that :func:`kept_per_user` pairs them
    with that row only. Returns the file, or None when the run saved no per-user values.

    Raises:
        BenchError: the run's per-user file lacks one of ``metrics``.
    """
    loaded = res.load_per_user()
    if loaded is None:
        return None
    users, values = loaded
    missing = [m for m in metrics if m not in values]
    if missing:
        raise BenchError(f"{res.run_dir}: its per-user test file has no {', '.join(missing)} "
                         f"(it has {', '.join(sorted(values))}); keep those instead")
    buf = io.BytesIO()
    # users as steps (mostly 1s) and the metrics' few distinct values compress to kilobytes a run
    arrays: dict[str, Any] = {m: np.asarray(values[m], dtype=np.float64) for m in metrics}
    np.savez_compressed(buf, user_steps=np.diff(np.asarray(users, dtype=np.int64), prepend=0),
                        finished_at=np.array(res.finished_at or ""), **arrays)
    path = per_user_path(ledger, res.seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue())
    return path


def kept_per_user(ledger: Path, row: Mapping[str, object]) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """(users (U,), {metric: (U,) float64}) that :func:`keep_per_user` kept for this ledger row,
    or None when none were kept or they belong to another run of its seed (a rerun's row)."""
    path = per_user_path(ledger, int(row["seed"]))  # type: ignore[call-overload]
    if not path.is_file():
        return None
    with np.load(path) as z:
        if str(z["finished_at"]) != str(row.get("finished_at") or ""):
            return None
        return np.cumsum(z["user_steps"]), {k: z[k] for k in z.files if k not in ("user_steps", "finished_at")}


def metric_column(metric: str) -> str:
    """The ledger column of a metric as ``bench.report`` names it: ``ndcg@20`` -> ``test/ndcg@20``,
    ``edge:mrr`` -> ``edge/mrr``; a loss diagnostic keeps its column name (``diag/thm32_holds``)."""
    if metric.startswith("diag/"):
        return metric
    return metric.replace("edge:", "edge/", 1) if metric.startswith("edge:") else f"test/{metric}"


def ledger_values(rows: Iterable[Mapping[str, object]], column: str) -> dict[int, float]:
    """``{seed: value}`` of one column over the rows that have it (NaN and blanks left out)."""
    out = {}
    for r in rows:
        v = r.get(column)
        if isinstance(v, float | int) and not math.isnan(float(v)):
            out[int(r["seed"])] = float(v)  # type: ignore[call-overload]
    return out
