"""A study's results read back from its ledgers: per table and row, mean ± 95% t-interval over the
replicates, the paper's value and the gap to it, the change against the baseline with the paired
t-test over seeds and the Wilcoxon test over users (Holm-corrected, or as the study's ``correction``
says, over the study or each table), the chosen setting, the commits that produced it. Written as
``results/<study>/summary.csv`` and the page ``docs/results/<study>.md``."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.composition import compose
from bench.losses.families import paper_name
from bench.records.io import atomic_write_bytes
from bench.records.ledger import read_ledger
from bench.report.runs import RunRecord, from_ledger
from bench.report.stats import adjust, compare, interval
from bench.study.plan import NotChosen, base_overrides, chosen, tuning_table
from bench.study.spec import PAGES_DIR, Study

NAN = math.nan


@dataclass
class Row:
    """One row of a study's table, computed."""

    table: str
    row: str
    records: list[RunRecord]
    setting: str
    edge: bool
    paper: dict[str, float]
    label: str = ""
    loss: str = ""
    values: dict[str, Any] = field(default_factory=dict)


def correction_label(study: Study) -> str:
    """How the study's tables name their multiple-comparison correction (``Holm``, the default)."""
    return {"holm": "Holm", "bh": "Benjamini-Hochberg", "bonferroni": "Bonferroni",
            "none": "no correction"}[study.correction]


def fmt(x: float, digits: int = 4) -> str:
    """``0.1670`` -> ``.1670`` (the tables' style), NaN -> ``–``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    text = f"{x:.{digits}f}"
    return text.replace("0.", ".", 1) if abs(x) < 1 and text.lstrip("-").startswith("0.") else text


def pct(x: float) -> str:
    """A relative change as ``+2.6%`` / ``−1.5%``."""
    if x is None or math.isnan(x):
        return "–"
    return f"{'+' if x >= 0 else '−'}{abs(x) * 100:.1f}%"


def pval(p: float) -> str:
    """Two significant digits: ``.087``, ``.12``; below .001 as ``7.5·10⁻⁵``."""
    if p is None or math.isnan(p):
        return "–"
    if p >= 1:
        return "1"
    exponent = math.floor(math.log10(p)) if p > 0 else -999
    if p >= 0.001:
        return fmt(p, 1 - exponent).rstrip("0").rstrip(".") if p < 1 else "1"
    mantissa = f"{p / 10 ** exponent:.1f}".removesuffix(".0")
    sup = str(exponent).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mantissa}·10{sup}"


def number(value: Any) -> float:
    """A ledger cell as a float (NaN when empty or not a number)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return NAN


#: ledger columns shown as counts or seconds rather than metrics
WHOLE_COLUMNS = ("best_epoch", "epochs_trained", "diag/beta_effective_rank_median")


def column_text(name: str, value: float) -> str:
    if value is None or math.isnan(value):
        return "–"
    if name in WHOLE_COLUMNS:
        return f"{value:.0f}"
    if name.endswith("_s"):
        return f"{value:.2f}"
    if name.endswith("_min"):
        return f"{value:.1f}"
    return fmt(value)


def _names(study: Study, table: str, row: str) -> tuple[dict[str, Any], dict[str, float]]:
    cfg = compose([*base_overrides(study, table, row), "output_dir=unused"])
    names = {"task": str(cfg.task.name), "dataset": str(cfg.dataset.name), "model": str(cfg.model.name),
             "loss": str(cfg.loss.name), "k": int(cfg.loss.k) if "k" in cfg.loss and cfg.loss.k else None}
    if study.paper is None:
        return names, {}
    given = study.paper.get(table, {}).get(row, {})
    if given == "none":  # the study's paper has no value for this row: not its experiment's either
        return names, {}
    paper = dict(given or {}) or dict(cfg.get("paper") or {})
    return names, {k: float(v) for k, v in paper.items()}


def rows_of(study: Study) -> list[Row]:
    """Every row of every table with its records (ledger rows; per-user values where kept)."""
    out = []
    for table in study.tables:
        for row in study.rows_of(table):
            names, paper = _names(study, table, row)
            try:
                setting, tuning = chosen(study, table, row)
                text, edge = " ".join(setting), bool(setting) and study.tune is not None and \
                    study.tune.rows[row].at_edge(setting)
            except NotChosen:
                setting, text, edge = [], "?", False
            records: list[RunRecord] = []
            for index, replicate in enumerate(study.replicate_values()):
                ledger = study.ledger(table, row, replicate)
                rows = read_ledger(ledger)  # one setting a final ledger (update_ledger refuses a second)
                part = from_ledger(rows, names["task"], names["dataset"], names["model"], names["loss"], paper=paper,
                                   k=names["k"], source=str(ledger), ledger=ledger)
                for r in part:  # replicates (folds) x seeds: paired by their combination
                    r.seed = index * 10_000 + r.seed
                records += part
            label = paper_name(names["loss"], names["k"])
            variant = " ".join(o for o in study.rows[row] if not o.startswith(("loss=", "+loss=", "loss.k=")))
            shown = study.labels.get(row, f"{label} {variant}".strip())
            out.append(Row(table, row, records, text, edge, paper, shown, label))
    # rows that differ only in what tuning chose (bpr-reg's none and embedding-regulariser rows) read alike:
    # those labels carry their row's name
    seen = Counter((computed.table, computed.label) for computed in out)
    for computed in out:
        if seen[(computed.table, computed.label)] > 1:
            computed.label = f"{computed.label} ({computed.row})"
    return out


def compute(study: Study) -> list[Row]:
    rows = rows_of(study)
    by_name = {(r.table, r.row): r for r in rows}
    for r in rows:
        v = r.values
        v["n"] = len(r.records)
        for m in study.metrics:
            ci = interval(r.records, m) if r.records else {"mean": NAN, "ci_half": NAN}
            v[m], v[m + "_ci"] = ci["mean"], ci["ci_half"]
            v["paper_" + m] = r.paper.get(m, NAN)
            v["gap_" + m] = v[m] / r.paper[m] - 1 if m in r.paper and r.paper[m] else NAN
            refs = [x.ref[m] for x in r.records if m in x.ref]
            v["ref_" + m] = sum(refs) / len(refs) if refs else NAN
            v["ref_gap_" + m] = v["ref_" + m] / r.paper[m] - 1 if refs and r.paper.get(m) else NAN
        for m in study.sampled:
            values = [x.sampled[m] for x in r.records if m in x.sampled]
            v["sampled_" + m] = sum(values) / len(values) if values else NAN
        for m in study.columns:  # other ledger columns shown as the mean over runs (curve/..., diag/...)
            values = [number(x.extra.get(m)) for x in r.records]
            v[m] = sum(values) / len(values) if values and not any(math.isnan(x) for x in values) else NAN
        v["vs_baseline"] = v["p_seeds"] = v["p_users"] = NAN
        for m in study.compare_also:
            v["vs_baseline:" + m] = v["p_seeds:" + m] = NAN
        v["users"] = 0
        b = by_name.get((r.table, study.baseline_of(r.row) or ""))
        paper_metric = study.metric.split(":", 1)[-1]
        # a variant of the baseline's own loss has the loss's paper value, not one of its own
        if b is not None and b is not r and r.paper.get(paper_metric) and b.paper.get(paper_metric) and \
                r.loss != b.loss:
            v["paper_vs_baseline"] = r.paper[paper_metric] / b.paper[paper_metric] - 1
        if b is not None and b is not r and r.records and b.records:
            c = compare(r.records, b.records, study.metric)
            v["vs_baseline"], v["p_seeds"], v["p_users"], v["users"] = (c.rel_change, c.p_seed_t, c.p_user_wilcoxon,
                                                                         c.n_users)
            for m in study.compare_also:
                c = compare(r.records, b.records, m)
                v["vs_baseline:" + m], v["p_seeds:" + m] = c.rel_change, c.p_seed_t
    families = [rows] if study.holm == "study" else [[r for r in rows if r.table == t] for t in study.tables]
    for family in families:
        for r, p in zip(family, adjust([r.values["p_users"] for r in family], study.correction), strict=True):
            r.values["p_users_holm"] = p
    _recorded_user_tests(study, rows)
    _seed_summaries(study, rows)
    return rows


def _seed_summaries(study: Study, rows: list[Row]) -> None:
    """A row whose runs predate ledgers (their folders gone) but whose sweep left a seed summary
    (``results/<study>/<table>/<row>.summary.csv``: metric, n, mean, ci_half, seeds): its means and
    intervals from there, marked as such; no paired test is possible."""
    for r in rows:
        path = study.ledger(r.table, r.row, {}).with_suffix(".summary.csv")
        if r.records or not path.is_file():
            continue
        summary = pd.read_csv(path).set_index("metric")
        v = r.values
        for m in study.metrics:
            if m in summary.index:
                v[m], v[m + "_ci"] = float(summary.at[m, "mean"]), float(summary.at[m, "ci_half"])
                v["n"] = int(summary.at[m, "n"])
                v["gap_" + m] = v[m] / r.paper[m] - 1 if r.paper.get(m) else NAN
        for m in study.columns:
            if m in summary.index:
                v[m] = float(summary.at[m, "mean"])
        v["summary_only"] = str(path.relative_to(study.results))


RECORDED = "recorded.csv"


def _recorded_user_tests(study: Study, rows: list[Row]) -> None:
    """Values that need run folders no longer here (per-user tests, diagnostics the ledgers lack, a
    paired test of runs whose seeds were not kept): ``results/<study>/<table>/recorded.csv`` holds
    those computed while the folders existed (``row, <value columns>..., recorded``), each shown
    marked as such and only where the ledgers give no value. Read from the study's own folder, then
    beside the row's ledger (another study's, for a row whose runs are that study's)."""
    tables: dict[Path, pd.DataFrame | None] = {}  # each file read once, as text (its digits kept)

    def read(path: Path) -> pd.DataFrame | None:
        if path not in tables:
            tables[path] = pd.read_csv(path, dtype=str).set_index("row") if path.is_file() else None
        return tables[path]

    for r in rows:
        paths = dict.fromkeys([study.folder / r.table / RECORDED, study.ledger(r.table, r.row, {}).parent / RECORDED])
        for path in paths:
            recorded = read(path)
            if recorded is not None and r.row in recorded.index:
                _fill_recorded(r, recorded.loc[r.row])


def _fill_recorded(r: Row, recorded: pd.Series) -> None:
    """``r``'s values the ledgers left empty, from its row of a ``recorded.csv`` (read as text)."""
    for column, text in recorded.items():
        if column in ("recorded", "p_users_holm") or pd.isna(text) or not math.isnan(r.values.get(column, NAN)):
            continue
        r.values[column] = float(text)
        if column == "p_users":
            r.values["p_users_holm"] = float(recorded["p_users_holm"])
        r.values.setdefault("recorded", {})[column] = str(recorded["recorded"])
        r.values.setdefault("recorded_text", {})[column] = str(text).strip()


def p_text(v: Mapping[str, Any], key: str) -> str:
    """A p-value cell: as recorded where it was (at the precision it was written with), else two digits."""
    written = v.get("recorded_text", {}).get(key)
    if written is not None and key.startswith(("p_seeds", "p_users")):
        if "e" in written.lower():  # 8.8e-05 -> 8.8·10⁻⁵, its digits kept
            mantissa, exponent = written.lower().split("e")
            return f"{mantissa}·10" + str(int(exponent)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
        return written.replace("0.", ".", 1) if written.startswith("0.") else written
    return pval(v[key])


def summary_frame(study: Study, rows: list[Row]) -> pd.DataFrame:
    records = []
    for r in rows:
        commits = sorted({str(x.extra.get("commit", ""))[:7] for x in r.records} - {""})
        records.append({"table": r.table, "row": r.row, "name": r.label, "setting": r.setting, "grid_edge": r.edge,
                        "commits": " ".join(commits), **r.values})
    return pd.DataFrame(records)


#: the page's footer: whom each table's rows are paired with
AGAINST = "the baseline in each table's header (a row's own where its cell says \"vs\")"


def page(study: Study, rows: list[Row], tests: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The study's results page (markdown); ``tests``: :func:`view_tests`, computed here when not given."""
    tests = view_tests(study, rows) if tests is None else tests
    lines = [f"# {study.title}", ""]
    if study.source:
        lines += [f"Source: {study.source}.", ""]
    lines += [f"Reproduce: `python -m bench.study {study.name} run` (resumable; `status` shows what is left), then "
              f"`python -m bench.study {study.name} report`. Records: `results/{study.name}/`.", ""]
    for table in study.tables:
        members = [r for r in rows if r.table == table]
        # the header names the baseline most of the table's compared rows have (ML-100K's rows are compared with
        # SL@20 in a study whose baseline is Gowalla's SL); a row compared with another says so in its cell
        bases = Counter(b for r in members if (b := study.compared_with(table, r.row)) is not None)
        table_base = max(bases, key=lambda b: (bases[b], b == study.baseline)) if bases else study.baseline
        label_of = {r.row: r.label for r in members}
        baseline = f"vs {label_of.get(table_base, table_base)}" if table_base else ""
        head = ["row", "runs", *[study.labels.get(m, m) for m in study.metrics]]
        # a re-test the study declares, or one recorded for its rows (not one its borrowed ledgers hold)
        head += [f"{m}, reference protocol" for m in study.metrics
                 if any(not math.isnan(r.values.get("ref_" + m, NAN)) and
                        (study.ref or "ref_" + m in r.values.get("recorded", {})) for r in members)]
        if study.sampled:
            head += [f"sampled {m} (biased)" for m in study.sampled]
        head += [study.labels.get(m, m) for m in study.columns]
        if study.baseline:
            head += [f"{study.metric} {baseline}", "p (paired runs)", f"p ({study.per}, {correction_label(study)})"]
            for m in study.compare_also:
                head += [f"{m} {baseline}", f"p ({m}, paired runs)"]
        head += ["setting"]
        lines += [f"## {table}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in members:
            v = r.values
            cells = [r.label + (" ‡" if "summary_only" in v else ""), str(v["n"])]
            kept = v.get("recorded", {})

            def mark(key: str, kept: Mapping[str, str] = kept) -> str:
                return " †" if key in kept else ""

            for m in study.metrics:
                cell = f"{fmt(v[m])} ± {fmt(v[m + '_ci'])}" if v["n"] and not math.isnan(v[m]) else "–"
                if m in kept:  # a mean recorded without its interval
                    cell = fmt(v[m]) + mark(m)
                if not math.isnan(v["paper_" + m]):
                    cell += f" ({study.paper_label} {fmt(v['paper_' + m])}, {pct(v['gap_' + m])})"
                cells.append(cell)
            for m in study.metrics:
                if f"{m}, reference protocol" in head:
                    cell = fmt(v["ref_" + m]) + (" †" if "ref_" + m in v.get("recorded", {}) else "")
                    gap = v["ref_gap_" + m]
                    if math.isnan(gap) and not math.isnan(v["ref_" + m]) and r.paper.get(m):
                        gap = v["ref_" + m] / r.paper[m] - 1
                    if not math.isnan(gap):
                        cell += f" ({pct(gap)})"
                    cells.append(cell)
            cells += [fmt(v["sampled_" + m]) for m in study.sampled]
            cells += [(p_text(v, m) if m.startswith("p_") else column_text(m, v[m])) + mark(m) for m in study.columns]
            if study.baseline:
                own = study.compared_with(table, r.row)
                compared = own is not None
                versus = "" if own is None or own == table_base else f" (vs {label_of.get(own, own)})"
                theirs = v.get("paper_vs_baseline", NAN)
                paper_change = f" ({study.paper_label} {pct(theirs)})" if not math.isnan(theirs) else ""
                holm_p = pval(v["p_users_holm"])
                unadjusted = f" (unadjusted {p_text(v, 'p_users')})" if p_text(v, "p_users") != holm_p else ""
                cells += [pct(v["vs_baseline"]) + mark("vs_baseline") + versus + paper_change if compared else "",
                          p_text(v, "p_seeds") + mark("p_seeds") if compared else "",
                          holm_p + unadjusted + mark("p_users") if compared else ""]
                for m in study.compare_also:
                    cells += [pct(v["vs_baseline:" + m]) + mark("vs_baseline:" + m) if compared else "",
                              p_text(v, "p_seeds:" + m) + mark("p_seeds:" + m) if compared else ""]
            cells.append((r.setting or "–") + (" (grid edge)" if r.edge else ""))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    for view in study.views:
        lines += _view_lines(study, rows, view, tests.get(view["title"], {}))
    over = "seeds x " + ", ".join(study.replicates) if study.replicates else "seeds"
    lines += [f"Mean ± 95% Student-t half-width over the runs ({over}). "
              f"Paired tests against {AGAINST if study.baseline else 'no baseline'}: "
              f"t over the runs both ran (paired by "
              f"{over}), Wilcoxon signed-rank over {study.per} (each one's {study.metric} averaged over the runs "
              "both ran; only where per-user values were kept), "
              f"{correction_label(study)} over {'the whole study' if study.holm == 'study' else 'each table'}."]
    summaries = sorted({r.values["summary_only"] for r in rows if "summary_only" in r.values})
    if summaries:
        lines += ["", "‡ runs made before ledgers existed, their folders since gone: the means and intervals are "
                      f"their sweep's seed summary ({', '.join(f'`results/{x}`' for x in summaries)}); no paired "
                      "test but one recorded then (†), and a rerun would add them to a ledger."]
    recorded = sorted({when for r in rows for when in r.values.get("recorded", {}).values()})
    if recorded:
        lines += ["", f"† not in the ledgers but recorded apart ({'; '.join(recorded)}): what a ledger row cannot "
                      f"hold (per-user tests and diagnostics of runs whose folders are gone, measurements made "
                      f"apart), read from `{RECORDED}` in the table's folder."]
    if study.notes:
        lines += ["", study.notes.strip()]
    return "\n".join(lines) + "\n"


def view_comparisons(study: Study, rows: list[Row], view: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """A view's paired tests against its own baseline: row -> {vs_baseline, p_seeds, p_users, and their Holm
    adjustments over the view's rows with a value, p_seeds_holm and p_users_holm; vs_baseline:<m>, p_seeds:<m>
    for the study's compare_also}; {} without one. The seeds' test is adjusted too: rows borrowed from
    studies that kept no per-user values have no users' test, and the view's question is one family."""
    by_row = {r.row: r for r in rows if r.table == view["table"]}
    base = by_row.get(view.get("baseline") or "")
    if base is None or not base.records:
        return {}
    out: dict[str, dict[str, float]] = {}
    for name in view["rows"]:
        r = by_row.get(name)
        if r is None or r is base or not r.records:
            continue
        c = compare(r.records, base.records, study.metric)
        out[name] = {"vs_baseline": c.rel_change, "p_seeds": c.p_seed_t, "p_users": c.p_user_wilcoxon}
        for m in study.compare_also:
            also = compare(r.records, base.records, m)
            out[name].update({"vs_baseline:" + m: also.rel_change, "p_seeds:" + m: also.p_seed_t})
    for key in ("p_seeds", "p_users"):
        for name, p in zip(out, adjust([v[key] for v in out.values()], study.correction), strict=True):
            out[name][key + "_holm"] = p
    return out


def view_tests(study: Study, rows: list[Row]) -> dict[str, dict[str, dict[str, float]]]:
    """Every view's :func:`view_comparisons`, by the view's title (computed once for the page and views.csv:
    each is a full paired test per row)."""
    return {view["title"]: view_comparisons(study, rows, view) for view in study.views if view.get("baseline")}


def _view_lines(study: Study, rows: list[Row], view: Mapping[str, Any],
                tests: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Another table of the same runs: ``view``'s rows, each metric as mean ± CI (paper, gap), and where
    the view has a baseline each row's paired tests against it."""
    by_row = {r.row: r for r in rows if r.table == view["table"]}
    head = ["row", "runs", *view["metrics"]]
    baseline = view.get("baseline")
    if baseline:
        against = f"vs {by_row[baseline].label if baseline in by_row else baseline}"
        head += [f"{study.metric} {against}", f"p (paired runs, {correction_label(study)} over this table)",
                 f"p ({study.per}, {correction_label(study)} over this table)"]
        for m in study.compare_also:
            head += [f"{m} {against}", f"p ({m}, paired runs)"]
    lines = [f"## {view['title']}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in view["rows"]:
        r = by_row.get(name)
        if r is None:
            continue
        cells = [r.label, str(len(r.records))]
        for m in view["metrics"]:
            if not r.records:
                cells.append("–")
                continue
            ci = interval(r.records, m)
            cell = f"{fmt(ci['mean'])} ± {fmt(ci['ci_half'])}"
            if m in r.paper:
                cell += f" ({study.paper_label} {fmt(r.paper[m])}, {pct(ci['mean'] / r.paper[m] - 1)})"
            refs = [x.ref[m] for x in r.records if m in x.ref]
            if refs:  # the reference protocol's value, the one comparable with the paper's
                ref = sum(refs) / len(refs)
                cell += f"; reference protocol {fmt(ref)}"
                cell += f" ({pct(ref / r.paper[m] - 1)})" if r.paper.get(m) else ""
            cells.append(cell)
        if baseline:
            t = tests.get(name)
            seeds = pval(t["p_seeds_holm"]) if t else ""
            if t and seeds != pval(t["p_seeds"]):
                seeds += f" (unadjusted {pval(t['p_seeds'])})"
            cells += [pct(t["vs_baseline"]), seeds, pval(t["p_users_holm"])] if t else ["", "", ""]
            for m in study.compare_also:
                cells += [pct(t["vs_baseline:" + m]), pval(t["p_seeds:" + m])] if t else ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
    if view.get("note"):
        lines += ["", view["note"]]
    return [*lines, ""]


VIEWS = "views.csv"


def views_frame(study: Study, rows: list[Row],
                tests: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None) -> pd.DataFrame:
    """Every view with a baseline of its own, a line per row: its label, runs, the study's metric (mean,
    CI) and the paired tests against the view's baseline (``results/<study>/views.csv``: the leaderboard's
    view tables read it, as they read summary.csv for the study's tables)."""
    records = []
    metric = study.metric.split(":", 1)[-1]
    tests = view_tests(study, rows) if tests is None else tests
    for view in study.views:
        if not view.get("baseline"):
            continue
        paired = tests.get(view["title"], {})
        by_row = {r.row: r for r in rows if r.table == view["table"]}
        for name in view["rows"]:
            r = by_row.get(name)
            if r is None:
                continue
            records.append({"view": view["title"], "table": view["table"], "row": name, "name": r.label,
                            "baseline": view["baseline"], "n": len(r.records), metric: r.values.get(metric, NAN),
                            metric + "_ci": r.values.get(metric + "_ci", NAN),
                            **{k: paired.get(name, {}).get(k, NAN)
                               for k in ("vs_baseline", "p_seeds", "p_seeds_holm", "p_users", "p_users_holm")}})
    return pd.DataFrame(records)


def write_report(study: Study, pages: Path = PAGES_DIR) -> tuple[Path, Path]:
    """Write ``results/<study>/summary.csv`` (and ``views.csv`` where a view has its own baseline) and
    ``docs/results/<study>.md``; the summary's and the page's paths."""
    rows = compute(study)
    summary = study.folder / "summary.csv"
    atomic_write_bytes(summary, summary_frame(study, rows).to_csv(index=False).encode())
    tests = view_tests(study, rows)
    views = views_frame(study, rows, tests)
    if not views.empty:
        atomic_write_bytes(study.folder / VIEWS, views.to_csv(index=False).encode())
    if study.tune is not None:  # every trial's validation value: the choice, readable without run folders
        trials = []
        for table in study.tables:
            for row in study.tune.rows:
                if row not in study.rows_of(table):
                    continue
                try:
                    trials += tuning_table(study, table, row)
                except NotChosen:
                    continue
        if trials:
            atomic_write_bytes(study.tuning_record, pd.DataFrame(trials).to_csv(index=False).encode())
    out = pages / f"{study.name}.md"
    atomic_write_bytes(out, page(study, rows, tests).encode())
    return summary, out
