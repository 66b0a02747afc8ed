"""A run ledger: one CSV row per completed run, small enough to commit beside a study's summary.

A paper-scale cell (five Gowalla seeds at over an hour each on two CPU cores) outlives the
machine it started on, and run folders (checkpoints, per-user files) are never committed. The
ledger keeps what the cell's summary needs from every finished run: its seed, the exact setting
(the overrides that made it), the data it read, the code it ran, and its test metrics. A later
session on another machine adds the seeds it runs to the same file, and the summary pools them.

Rows are keyed by seed: a run of a seed the ledger already holds replaces that row. A ledger
holds one setting and one data version; a run of another is refused in one line, so seeds of
different configurations are never pooled by accident.
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from bench.errors import BenchError
from bench.results.schema import (
    PLACEMENT_KEYS,
    PLACEMENT_PREFIXES,
    SEED_KEYS,
    SIDE_OUTPUT_KEYS,
    RunResult,
    override_key,
)

LEDGER_FILE = "runs.csv"
#: the columns before the metrics; metric columns are ``test/<metric>``, ``edge/<metric>`` (link
#: prediction's per-edge protocol) and any caller's extras (``ref/<metric>``: the same checkpoint
#: under another test protocol)
ID_COLUMNS = ("seed", "setting", "data", "commit", "dirty", "finished_at", "epochs_trained", "best_epoch", "fit_s")


def setting_of(overrides: Iterable[str]) -> str:
    """The overrides that make a run's configuration, seed and placement left out, sorted and
    joined by spaces: two runs with the same setting differ only in their seed."""
    kept = []
    for o in overrides:
        key = override_key(o)
        if key in SEED_KEYS | PLACEMENT_KEYS | SIDE_OUTPUT_KEYS or key.startswith(PLACEMENT_PREFIXES):
            continue
        kept.append(o.lstrip("+~"))
    return " ".join(sorted(kept))


def data_digest(res: RunResult) -> str:
    """12 hex digits naming the data files the run read and their SHA-256 ("" when unrecorded)."""
    files = res.data_files
    if not files:
        return ""
    text = "\n".join(f"{Path(name).name}={digest}" for name, digest in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def ledger_row(res: RunResult, extra: Mapping[str, float] | None = None) -> dict[str, object]:
    """One completed run as a ledger row: its identity, ``test/<metric>`` for every test metric,
    ``edge/<metric>`` for every per-edge one, then ``extra`` (column -> value) as given."""
    code = res.provenance.get("code") or {}
    row: dict[str, object] = {
        "seed": res.seed,
        "setting": setting_of(res.overrides),
        "data": data_digest(res),
        "commit": code.get("commit") or "",
        "dirty": code.get("dirty") if code.get("dirty") is not None else "",
        "finished_at": res.finished_at or "",
        "epochs_trained": res.epochs_trained if res.epochs_trained is not None else "",
        "best_epoch": res.best.get("epoch", ""),
        "fit_s": round(float(res.timing_s["fit"]), 1) if "fit" in res.timing_s else "",
    }
    row.update({f"test/{m}": float(v) for m, v in sorted(res.test.items())})
    row.update({f"edge/{m}": float(v) for m, v in sorted(res.per_edge.items()) if m != "edges"})
    row.update(dict(extra or {}))
    return row


def read_ledger(path: Path) -> list[dict[str, object]]:
    """The ledger's rows ([] when the file does not exist), numbers as int / float."""
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in ("seed", "setting") if c not in (reader.fieldnames or [])]
        if missing:
            raise BenchError(f"{path} is not a run ledger (no {', '.join(missing)} column); move it aside")
        rows = []
        for line, raw in enumerate(reader, start=2):
            try:
                rows.append({k: _number(k, v) for k, v in raw.items()})
            except ValueError as exc:
                raise BenchError(f"{path}, line {line}: {exc}; fix or delete that row") from None
    return rows


def _number(column: str, text: str | None) -> object:
    if column == "seed":
        return int(text or "")
    if column.startswith(("test/", "edge/", "ref/")) or column in ("fit_s",):
        return float(text) if text not in (None, "") else math.nan
    return text if text is not None else ""


def update_ledger(path: Path, new_rows: Iterable[Mapping[str, object]]) -> list[dict[str, object]]:
    """Add ``new_rows`` to the ledger at ``path`` (a row of a seed already there replaces it),
    write it back sorted by seed, and return every row as :func:`read_ledger` reads it.

    Raises:
        BenchError: a new row's setting or data differs from the ledger's.
    """
    rows = {int(r["seed"]): dict(r) for r in read_ledger(path)}  # type: ignore[call-overload]
    for new in new_rows:
        for key in ("setting", "data"):
            held = {str(r[key]) for r in rows.values() if r.get(key) not in (None, "")}
            if new.get(key) not in (None, "") and held and str(new[key]) not in held:
                raise BenchError(
                    f"{path} holds runs with {key} {sorted(held)[0]!r}, but seed {new['seed']} ran with "
                    f"{new[key]!r}: pool only runs of one configuration on the same data; write this one "
                    "to another folder (--ledger) or move the old ledger aside")
        rows[int(new["seed"])] = dict(new)  # type: ignore[call-overload]
    ordered = [rows[s] for s in sorted(rows)]
    columns = list(ID_COLUMNS)
    for r in ordered:
        columns += [c for c in r if c not in columns]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(ordered)
    tmp.replace(path)
    return read_ledger(path)


def metric_column(metric: str) -> str:
    """The ledger column of a metric as ``bench.report`` names it: ``ndcg@20`` -> ``test/ndcg@20``,
    ``edge:mrr`` -> ``edge/mrr``."""
    return metric.replace("edge:", "edge/", 1) if metric.startswith("edge:") else f"test/{metric}"


def ledger_values(rows: Iterable[Mapping[str, object]], column: str) -> dict[int, float]:
    """``{seed: value}`` of one column over the rows that have it (NaN and blanks left out)."""
    out = {}
    for r in rows:
        v = r.get(column)
        if isinstance(v, float | int) and not math.isnan(float(v)):
            out[int(r["seed"])] = float(v)  # type: ignore[call-overload]
    return out
