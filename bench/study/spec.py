"""A study as data: ``conf/study/<name>.yaml`` declares what to run and how to read it.

    title: Table 6, SASRec
    source: SL@K paper (arXiv 2508.05673), Table 6
    tables:                  # the tables: each compares its rows with the baseline, on its own data
      games: [+experiment=seq/table6_games]     # or {overrides: [...], rows: [bce, sl], seeds: [...]}
    rows:                    # the configurations compared (one ledger each, per table)
      bce: [loss=bce]        # or {overrides, seeds, baseline, record}: its own seeds, the row it is
                             # compared with, the study whose ledgers hold its runs
      sl: [loss=sl]
      slk: [loss=slk]
    common: []               # overrides every run gets that are part of its configuration
    placement: [logger=csv]  # overrides every run gets that are not (where it logs, ...)
    seeds: [0, 1, 2]
    replicates: {}           # more replicate axes besides the seed, e.g. {dataset.fold: [1, 2, 3, 4, 5]}
    baseline: sl             # the row every other is paired with
    metric: ndcg@20          # the metric of the paired tests
    compare_also: [recall@20]    # more metrics compared with the baseline (t over paired runs only)
    columns: [fit_s]         # more ledger (or recorded) columns shown, as the mean over runs
    labels: {fit_s: fit (s)} # the columns' headings, and rows' names where the loss and its overrides say too much
    metrics: [hit@20, ndcg@20]
    sampled: [hit@10, ndcg@10]   # the biased sampled protocol's, shown apart
    per_user: [ndcg@20, hit@20]  # per-user test values kept beside the ledgers (paired tests outlive run folders)
    holm: study              # the correction's family: every comparison of the study, or of each table
    correction: holm         # the family's multiple-comparison correction: holm, bh (Benjamini-Hochberg,
                             # false discovery rate: many losses at once), bonferroni or none
    per: users               # what the per-user test pairs (users, queries, nodes)
    ref: {overrides: [eval.test_masks_valid=false], metrics: [ndcg@20]}   # a re-test of each run's best model
    views: []                # more tables of the same runs: [{title, table, rows, metrics}], each
                             # optionally with baseline: a row of the table the view's rows are paired with
    paper: {}                # the paper's values where the experiments' ``paper:`` nodes lack
                             # them: {table: {row: {metric: value}}} (a row's ``none``: no values
                             # for it, not even its experiment's); ``none``: the paper has no
                             # values for these runs (not even the experiments')
    tune:                    # optional: settings chosen on validation before the reported runs
      replicate: {seed: 100} # the one run of each trial: a seed no reported run uses
      metric: ndcg@20        # validation metric (the best epoch's)
      rows:
        sl: {grid: [{loss.tau: [0.02, 0.05, 0.1]}]}
        slk: {grid: [{loss.tau_w: [0.5, 1.0]}], inherit: {loss.tau_d: [sl, loss.tau]}}

Every reported run is one (table, row, replicate, seed): its overrides are the table's, the
row's, ``common``, the row's tuned setting, the replicate's and the seed; its record is a row of
the ledger ``results/<study>/<table>/<row>[_<axis><value>].csv``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.composition import CONFIG_DIR
from bench.errors import ConfigError
from bench.report.stats import CORRECTIONS
from bench.strict_yaml import load_strict

STUDY_DIR = Path(CONFIG_DIR) / "study"
#: where studies keep their records (ledgers, per-user files, summaries), one folder per study
RESULTS_DIR = Path(CONFIG_DIR).parent / "results"
#: where studies' generated pages go
PAGES_DIR = Path(CONFIG_DIR).parent / "docs" / "results"
KEYS = {"title", "source", "tables", "rows", "common", "placement", "seeds", "replicates", "baseline", "metric",
        "metrics", "sampled", "per_user", "holm", "correction", "ref", "paper", "tune", "notes", "paper_label",
        "columns", "curve", "per", "views", "compare_also", "labels"}
HOLM = ("study", "table")


@dataclass(frozen=True)
class TuneRow:
    """One row's tuning: grids of settings (each the product of its keys' values) and the values it
    takes from another row's choice (``{loss.tau_d: (sl, loss.tau)}``) where a grid does not set them."""

    grids: tuple[Mapping[str, tuple[Any, ...]], ...]
    inherit: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def trials(self, inherited: Mapping[str, Any]) -> list[list[str]]:
        """Each trial's overrides, in grid order: the inherited values, then the grid's."""
        out = []
        for grid in self.grids:
            keys = list(grid)
            taken = [f"{k}={v}" for k, v in inherited.items() if k not in grid]
            for values in itertools.product(*(grid[k] for k in keys)):
                out.append([*taken, *(f"{k}={v}" for k, v in zip(keys, values))])
        return out

    def at_edge(self, setting: Sequence[str]) -> bool:
        """Is a chosen setting at the first or last value of a grid key (the best may lie beyond)?"""
        chosen = dict(o.split("=", 1) for o in setting)
        return any(str(values[0]) == chosen.get(k) or str(values[-1]) == chosen.get(k)
                   for grid in self.grids for k, values in grid.items() if len(values) > 1 and k in chosen)


@dataclass(frozen=True)
class Tuning:
    replicate: Mapping[str, Any]
    metric: str
    rows: Mapping[str, TuneRow]


@dataclass(frozen=True)
class Study:
    """A study's declaration (see the module docstring)."""

    name: str
    title: str
    tables: Mapping[str, tuple[str, ...]]
    rows: Mapping[str, tuple[str, ...]]
    seeds: tuple[int, ...]
    metric: str
    metrics: tuple[str, ...]
    source: str = ""
    common: tuple[str, ...] = ()
    placement: tuple[str, ...] = ()
    replicates: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    baseline: str | None = None
    sampled: tuple[str, ...] = ()
    per_user: tuple[str, ...] = ()
    holm: str = "table"
    correction: str = "holm"
    ref: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    paper: Mapping[str, Mapping[str, Mapping[str, float]]] | None = field(default_factory=dict)
    paper_label: str = "paper"
    tune: Tuning | None = None
    notes: str = ""
    columns: tuple[str, ...] = ()
    compare_also: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    curve: Mapping[str, Any] = field(default_factory=dict)
    per: str = "users"
    table_rows: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    table_seeds: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    row_seeds: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    views: tuple[Mapping[str, Any], ...] = ()
    row_baselines: Mapping[str, str] = field(default_factory=dict)
    row_records: Mapping[str, str] = field(default_factory=dict)
    results: Path = RESULTS_DIR

    def baseline_of(self, row: str) -> str | None:
        """The row a row is compared with: its own baseline, else the study's."""
        return self.row_baselines.get(row, self.baseline)

    def compared_with(self, table: str, row: str) -> str | None:
        """The row ``row`` is compared with in ``table``: its baseline, when that is another of the table's rows."""
        base = self.baseline_of(row)
        return base if base is not None and base != row and base in self.rows_of(table) else None

    def rows_of(self, table: str) -> tuple[str, ...]:
        """The rows a table compares (every row, unless the table names some)."""
        return self.table_rows.get(table) or tuple(self.rows)

    def seeds_of(self, table: str, row: str) -> tuple[int, ...]:
        """The seeds a row runs in a table: its own, else the table's, else the study's."""
        return self.row_seeds.get(row) or self.table_seeds.get(table) or self.seeds

    @property
    def folder(self) -> Path:
        """``results/<study>``: its ledgers, kept per-user values, tuning record and summary."""
        return self.results / self.name

    def replicate_values(self) -> list[dict[str, Any]]:
        """Every combination of the extra replicate axes ([{}] when there are none)."""
        keys = list(self.replicates)
        return [dict(zip(keys, values)) for values in itertools.product(*(self.replicates[k] for k in keys))]

    def ledger(self, table: str, row: str, replicate: Mapping[str, Any]) -> Path:
        """The row's ledger in a table (another study's, where the row says its runs are that study's)."""
        tag = "".join(f"_{k.rsplit('.', 1)[-1]}{v}" for k, v in replicate.items())
        folder, name = self.folder, row
        if row in self.row_records:  # "study" or "study/row": that study's ledger of the row's runs
            study, _, name = self.row_records[row].partition("/")
            folder, name = self.results / study, name or row
        return folder / table / f"{name}{tag}.csv"

    def tune_ledger(self, table: str, row: str) -> Path:
        return self.folder / table / "tune" / f"{row}.csv"

    @property
    def tuning_record(self) -> Path:
        """The choices, with every trial's validation value (kept when the tune ledgers lack rows)."""
        return self.folder / "tuning.csv"


def _fail(name: str, why: str) -> ConfigError:
    return ConfigError(f"study {name}: {why}")


def _overrides(name: str, where: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(o, str) and "=" in o for o in value):
        raise _fail(name, f"{where} must be a list of key=value overrides, got {value!r}")
    return tuple(value)


def _names(name: str, where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise _fail(name, f"{where} must be a list of names, got {value!r}")
    return tuple(value)


def known_studies() -> list[str]:
    return sorted(p.stem for p in STUDY_DIR.glob("*.yaml"))


def load_study(name_or_path: str | Path, results: Path | None = None) -> Study:
    """The study ``conf/study/<name>.yaml`` (or a YAML file's path), checked.

    Raises:
        ConfigError: an unknown study (the known ones listed), or a malformed declaration (one line
            naming the key).
    """
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = STUDY_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown study {name_or_path!r}; known: {', '.join(known_studies()) or 'none'} "
                          f"(conf/study/<name>.yaml, or a path to one)")
    name = path.stem
    spec = load_strict(path, f"study {name}")
    if not isinstance(spec, dict):
        raise _fail(name, f"{path} must hold a mapping")
    unknown = sorted(set(spec) - KEYS)
    if unknown:
        raise _fail(name, f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KEYS))}")
    for needed in ("tables", "rows", "seeds", "metric", "metrics"):
        if needed not in spec:
            raise _fail(name, f"{needed} is missing")
    rows, row_seeds = {}, {}
    row_baselines, row_records = {}, {}
    for r, entry in (spec["rows"] or {}).items():
        if isinstance(entry, dict):
            unknown_keys = sorted(set(entry) - {"overrides", "seeds", "baseline", "record"})
            if unknown_keys:
                raise _fail(name, f"rows.{r} has unknown key(s) {', '.join(unknown_keys)}; a row takes overrides, "
                                  "seeds, baseline, record")
            rows[str(r)] = _overrides(name, f"rows.{r}.overrides", entry.get("overrides"))
            if entry.get("seeds") is not None:
                row_seeds[str(r)] = _seeds(name, f"rows.{r}.seeds", entry["seeds"])
            if entry.get("baseline") is not None:
                row_baselines[str(r)] = str(entry["baseline"])
            if entry.get("record") is not None:  # its ledgers are another study's (the same runs): study[/row]
                row_records[str(r)] = str(entry["record"])
        else:
            rows[str(r)] = _overrides(name, f"rows.{r}", entry)
    tables, table_rows, table_seeds = {}, {}, {}
    for t, entry in (spec["tables"] or {}).items():
        if isinstance(entry, dict):
            tables[str(t)] = _overrides(name, f"tables.{t}.overrides", entry.get("overrides"))
            table_rows[str(t)] = _names(name, f"tables.{t}.rows", entry.get("rows") or list(rows))
            if entry.get("seeds") is not None:
                table_seeds[str(t)] = _seeds(name, f"tables.{t}.seeds", entry["seeds"])
            unknown_rows = [r for r in table_rows[str(t)] if r not in rows]
            if unknown_rows:
                raise _fail(name, f"tables.{t}.rows names {', '.join(unknown_rows)}, no row; rows: {', '.join(rows)}")
        else:
            tables[str(t)] = _overrides(name, f"tables.{t}", entry)
    if not tables or not rows:
        raise _fail(name, "tables and rows must each name at least one")
    seeds = _seeds(name, "seeds", spec["seeds"])
    baseline = spec.get("baseline")
    for b in [baseline, *row_baselines.values()]:
        if b is not None and b not in rows:
            raise _fail(name, f"baseline {b!r} is no row; rows: {', '.join(rows)}")
    holm = spec.get("holm", "table")
    if holm not in HOLM:
        raise _fail(name, f"holm={holm!r}; use {' or '.join(HOLM)}")
    correction = spec.get("correction", "holm")
    if correction not in CORRECTIONS:
        raise _fail(name, f"correction={correction!r}; use one of {', '.join(CORRECTIONS)}")
    replicates = {str(k): tuple(v) for k, v in (spec.get("replicates") or {}).items()}
    if any(not v for v in replicates.values()) or "seed" in replicates:
        raise _fail(name, "replicates maps keys other than seed to non-empty lists of values")
    ref = spec.get("ref") or {}
    if ref and (set(ref) != {"overrides", "metrics"}):
        raise _fail(name, "ref needs overrides (the re-test's eval.* settings) and metrics")
    study = Study(
        name=name, title=str(spec.get("title", name)), source=str(spec.get("source", "")), tables=tables, rows=rows,
        seeds=seeds, metric=str(spec["metric"]), metrics=_names(name, "metrics", spec["metrics"]),
        common=_overrides(name, "common", spec.get("common")),
        placement=_overrides(name, "placement", spec.get("placement")), replicates=replicates, baseline=baseline,
        sampled=_names(name, "sampled", spec.get("sampled") or []),
        per_user=_names(name, "per_user", spec.get("per_user") or []), holm=holm, correction=correction,
        ref={"overrides": _overrides(name, "ref.overrides", ref.get("overrides")),
             "metrics": _names(name, "ref.metrics", ref.get("metrics"))} if ref else {},
        paper=_paper(name, spec.get("paper")), paper_label=str(spec.get("paper_label", "paper")),
        tune=_tuning(name, spec.get("tune"), rows), notes=str(spec.get("notes", "")),
        columns=_names(name, "columns", spec.get("columns") or []),
        compare_also=_names(name, "compare_also", spec.get("compare_also") or []),
        labels={str(k): str(v) for k, v in (spec.get("labels") or {}).items()},
        curve=_curve(name, spec.get("curve")),
        per=str(spec.get("per", "users")), table_seeds=table_seeds, row_seeds=row_seeds, views=(),
        row_baselines=row_baselines, row_records=row_records,
        table_rows=table_rows, results=results or RESULTS_DIR)
    # views checked against the built study, so a table's rows mean what Study.rows_of says they mean
    views = tuple(_view(name, v, study) for v in spec.get("views") or [])
    titles = [v["title"] for v in views]
    if len(set(titles)) < len(titles):  # the report, views.csv and the site key a view's tests by its title
        shared = ", ".join(dict.fromkeys(t for t in titles if titles.count(t) > 1))
        raise _fail(name, f"two views share a title ({shared}); give each its own")
    return replace(study, views=views)


def _paper(name: str, spec: Any) -> Mapping[str, Any] | None:
    """The paper's values by table and row; None when the study says ``paper: none``."""
    if spec == "none":
        return None
    if spec is not None and not isinstance(spec, dict):
        raise _fail(name, f"paper must map tables to rows to metrics, or be none; got {spec!r}")
    return spec or {}


def _seeds(name: str, where: str, seeds: Any) -> tuple[int, ...]:
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise _fail(name, f"{where} must be a list of integers >= 0, got {seeds!r}")
    return tuple(seeds)


def _view(name: str, spec: Any, study: Study) -> dict[str, Any]:
    """``{title, table, rows, metrics}``: another table of the same runs (the paper's Table 3 of
    Table 2's runs, say), optionally with ``baseline``: the row the view's rows are paired with (a second
    baseline beside the study's, e.g. every new loss against SL@20 where the tables compare with SL)."""
    if not isinstance(spec, dict) or not {"title", "table", "rows", "metrics"} <= set(spec):
        raise _fail(name, "a view needs title, table, rows and metrics")
    if spec["table"] not in study.tables or any(r not in study.rows_of(spec["table"]) for r in spec["rows"]):
        raise _fail(name, f"view {spec['title']!r} names a table the study lacks or rows its table lacks")
    baseline = spec.get("baseline")
    if baseline is not None and baseline not in spec["rows"]:
        raise _fail(name, f"view {spec['title']!r}: baseline {baseline!r} is not one of its rows")
    return {"title": str(spec["title"]), "table": str(spec["table"]), "rows": tuple(spec["rows"]),
            "metrics": _names(name, "views.metrics", spec["metrics"]), "note": str(spec.get("note", "")),
            "baseline": None if baseline is None else str(baseline)}


def _curve(name: str, spec: Any) -> dict[str, Any]:
    """``curve: {metric: ndcg@20, epochs: [50, 100]}``: ledger columns ``curve/val_<metric>_e<E>``, the
    validation value at the last validation before epoch E (NaN where a run was set to fewer)."""
    if not spec:
        return {}
    if not isinstance(spec, dict) or set(spec) != {"metric", "epochs"} or not all(
            isinstance(e, int) and e > 0 for e in spec["epochs"]):
        raise _fail(name, "curve needs metric and epochs (a list of integers > 0)")
    return {"metric": str(spec["metric"]), "epochs": tuple(spec["epochs"])}


def _tuning(name: str, spec: Any, rows: Mapping[str, Any]) -> Tuning | None:
    if not spec:
        return None
    if not isinstance(spec, dict) or not {"replicate", "metric", "rows"} <= set(spec):
        raise _fail(name, "tune needs replicate (the trial runs' seed and replicate values), metric and rows")
    tune_rows = {}
    for row, entry in (spec["rows"] or {}).items():
        if row not in rows:
            raise _fail(name, f"tune.rows.{row} is no row; rows: {', '.join(rows)}")
        grids = entry.get("grid") if isinstance(entry, dict) else None
        if isinstance(grids, dict):
            grids = [grids]
        if not isinstance(grids, list) or not grids or not all(isinstance(g, dict) and g for g in grids):
            raise _fail(name, f"tune.rows.{row}.grid must be a grid {{key: [values]}} or a list of them")
        inherit = {}
        for key, source in (entry.get("inherit") or {}).items():
            if not (isinstance(source, list) and len(source) == 2 and source[0] in spec["rows"]):
                raise _fail(name, f"tune.rows.{row}.inherit.{key} must be [tuned row, its key], got {source!r}")
            inherit[str(key)] = (str(source[0]), str(source[1]))
        tune_rows[str(row)] = TuneRow(tuple({str(k): tuple(v) for k, v in g.items()} for g in grids), inherit)
    return Tuning(replicate=dict(spec["replicate"]), metric=str(spec["metric"]), rows=tune_rows)
