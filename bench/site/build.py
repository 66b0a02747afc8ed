"""The leaderboard's pages: ``index.html`` (every declared study) and ``<study>.html`` (its tables and figures).

What each page shows comes from two records, both committed:

* the study's ``results/<study>/summary.csv`` (written by ``python -m bench.study <study> report``): the
  tables' numbers, shown exactly as the study's markdown page formats them (so the two never disagree);
* its ledgers ``results/<study>/<table>/<row>[_<axis><value>].csv``: each finished run's metrics, for what
  the summary does not keep: the per-seed differences to the baseline (the forest plots) and the test
  metric at every K (the NDCG@K curves).

The ledgers are read directly rather than through :func:`bench.study.report.compute`, which composes each
row's Hydra config (seconds per study); the summary already holds what that adds. A summary that counts
other runs than its ledgers hold is flagged on the page, with the command that rewrites it.
"""

from __future__ import annotations

import csv
import math
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from urllib.parse import quote

from bench.errors import BenchError
from bench.records.ledger import read_ledger
from bench.report.runs import RunRecord, from_ledger
from bench.report.stats import seed_values, t_interval
from bench.site.plots import Interval, Point, Series, curves, forest, scatter
from bench.study.report import VIEWS, column_text, correction_label, fmt, number, pct, pval
from bench.study.spec import PAGES_DIR, Study, known_studies, load_study

NAN = math.nan
#: replicates (folds) x seeds are paired by their combination, as the report pairs them
#: (:func:`bench.study.report.rows_of`): replicate ``i``'s seed ``s`` is run ``i * REPLICATE_STRIDE + s``
REPLICATE_STRIDE = 10_000
#: the metric family drawn against K (test values of ``ndcg@K``)
CURVE_METRIC = "ndcg"


@dataclass
class Cell:
    """One row of one of a study's tables.

    Attributes:
        summary: its line of ``summary.csv`` (column -> text; {} when the summary lacks the row).
        ledgers: its ledger files that exist, one per replicate value (fold).
        records: their runs, seeds offset per replicate (see :data:`REPLICATE_STRIDE`).
    """

    table: str
    row: str
    summary: dict[str, str]
    ledgers: list[Path] = field(default_factory=list)
    records: list[RunRecord] = field(default_factory=list)

    def value(self, column: str) -> float:
        """A summary number (NaN when blank or absent)."""
        return number(self.summary.get(column) or NAN)

    @property
    def name(self) -> str:
        return self.summary.get("name") or self.row

    @property
    def runs(self) -> int:
        """The runs the summary counts (its seed-summary's, for a row run before ledgers existed)."""
        n = self.value("n")
        return 0 if math.isnan(n) else int(n)

    @property
    def stale(self) -> bool:
        """Does the summary count other runs than the ledgers hold (runs added since the report)?"""
        return bool(self.summary) and not self.summary.get("summary_only") and self.runs != len(self.records)


@dataclass
class StudyData:
    """A study's declaration with its cells, table by table (``summary``: its summary.csv, None when absent)."""

    study: Study
    cells: list[Cell]
    summary: Path | None

    def table(self, table: str) -> list[Cell]:
        return [c for c in self.cells if c.table == table]

    @property
    def runs(self) -> int:
        return sum(c.runs for c in self.cells)


def read_summary(study: Study) -> tuple[Path | None, dict[tuple[str, str], dict[str, str]]]:
    """``results/<study>/summary.csv`` as {(table, row): line} (None and {} when there is none yet).

    Raises:
        BenchError: the file lacks the table, row or n column (not a study summary).
    """
    path = study.folder / "summary.csv"
    if not path.is_file():
        return None, {}
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ("table", "row", "n") if c not in (reader.fieldnames or [])]
        if missing:
            raise BenchError(f"{path} is no study summary (no {', '.join(missing)} column); rewrite it with "
                             f"`python -m bench.study {study.name} report`")
        return path, {(line["table"], line["row"]): line for line in reader}


def load(study: Study) -> StudyData:
    """The study's summary lines and ledger runs, for every (table, row) it declares."""
    path, summary = read_summary(study)
    cells = []
    for table in study.tables:
        for row in study.rows_of(table):
            cell = Cell(table, row, summary.get((table, row), {}))
            for index, replicate in enumerate(study.replicate_values()):
                ledger = study.ledger(table, row, replicate)
                if not ledger.is_file():
                    continue
                cell.ledgers.append(ledger)
                for record in from_ledger(read_ledger(ledger), "", table, "", row, source=str(ledger)):
                    record.seed += index * REPLICATE_STRIDE
                    cell.records.append(record)
            cells.append(cell)
    return StudyData(study, cells, path)


def paired_differences(data: StudyData, table: str) -> tuple[list[Interval], list[str]]:
    """Each compared row's difference to its baseline on the study's metric, paired by seed (and fold).

    Returns:
        (intervals: mean of (row - baseline) over the runs both have and its 95% Student-t interval,
        in metric units, one per row with at least two pairs; notes: the compared rows without, and why).
    """
    study, cells = data.study, data.table(table)
    by_row = {c.row: c for c in cells}
    out, notes = [], []
    for cell in cells:
        base = study.compared_with(cell.table, cell.row)
        if base is None:
            continue
        ours, theirs = seed_values(cell.records, study.metric), seed_values(by_row[base].records, study.metric)
        pairs = sorted(set(ours) & set(theirs))
        label = cell.name + ("" if base == study.baseline else f" (vs {by_row[base].name})")
        if len(pairs) < 2:
            notes.append(f"{label}: {len(pairs)} paired run{'s' if len(pairs) != 1 else ''}")
            continue
        ci = t_interval([ours[s] - theirs[s] for s in pairs])
        # equal runs (a row identical to its baseline) have no spread: a zero-width interval, not NaN
        half = 0.0 if math.isnan(ci["ci_half"]) else ci["ci_half"]
        out.append(Interval(label, ci["mean"], ci["mean"] - half, ci["mean"] + half, len(pairs)))
    return out, notes


def metric_curves(cells: Sequence[Cell], family: str = CURVE_METRIC) -> list[Series]:
    """Each row's mean test ``<family>@K`` at every K its runs have; [] unless some row has two Ks or more."""
    out = []
    for cell in cells:
        by_k: dict[int, list[float]] = {}
        for record in cell.records:
            for name, value in record.test.items():
                head, _, k = name.partition("@")
                if head == family and k.isdigit() and math.isfinite(value):
                    by_k.setdefault(int(k), []).append(value)
        if len(by_k) >= 2:
            out.append(Series(cell.name, tuple((float(k), sum(v) / len(v)) for k, v in sorted(by_k.items()))))
    return out


def paper_points(study: Study, cells: Sequence[Cell]) -> list[Point]:
    """(paper, ours ± 95% half width) for every row and metric with both."""
    out = []
    for cell in cells:
        for m in study.metrics:
            ours, paper = cell.value(m), cell.value("paper_" + m)
            if math.isfinite(ours) and math.isfinite(paper):
                out.append(Point(cell.name, m, paper, ours, cell.value(m + "_ci")))
    return out


def href(target: Path, out: Path) -> str:
    """A link from a page in ``out`` to ``target``, relative (so the site and the repository move together)."""
    try:
        return quote(os.path.relpath(target.resolve(), out.resolve()).replace(os.sep, "/"))
    except ValueError:  # another drive (Windows): no relative path exists
        return target.resolve().as_uri()


def command(study: Study, table: str | None = None, row: str | None = None) -> str:
    """The command that runs (what is left of) a study, a table or one cell."""
    words = ["python", "-m", "bench.study", study.name, "run"]
    words += ["--tables", table] if table else []
    words += ["--rows", row] if row else []
    return shlex.join(words)


def _td(text: str, sort: float | str | None = None, cls: str = "", raw: bool = False, title: str = "") -> str:
    """A table cell; ``sort``: the number its column sorts by (NaN: blank, sorted last), None: its text."""
    attrs = f' class="{cls}"' if cls else ""
    if sort is not None:
        attrs += f' data-sort="{"" if isinstance(sort, float) and not math.isfinite(sort) else sort}"'
    if title:
        attrs += f' title="{escape(title)}"'
    return f"<td{attrs}>{text if raw else escape(text)}</td>"


def _link(text: str, target: str | None) -> str:
    return f'<a class="cell" href="{escape(target)}">{escape(text)}</a>' if target else escape(text)


def results_table(data: StudyData, table: str, out: Path) -> str:
    """A table's rows as a sortable HTML table: every metric's mean ± 95% half width (linked to the
    row's ledger), the paper's value and the gap to it, the change against the baseline and its tests,
    the setting and the command that reproduces the cell."""
    study, cells = data.study, data.table(table)
    has = lambda column: any(math.isfinite(c.value(column)) for c in cells)
    paper = {m: has("paper_" + m) for m in study.metrics}
    ref = [m for m in study.metrics if has("ref_" + m)]
    sampled = [m for m in study.sampled if has("sampled_" + m)]
    extra = [m for m in study.columns if has(m)]
    head = [("row", "text"), ("runs", "")]
    for m in study.metrics:
        head.append((m, ""))
        if paper[m]:
            head += [(f"{study.paper_label} {m}", ""), (f"gap {m}", "")]
    head += [(f"{m} (ref. protocol)", "") for m in ref] + [(f"sampled {m} (biased)", "") for m in sampled]
    head += [(m, "") for m in extra]
    if study.baseline:
        head += [(f"{study.metric} vs {study.baseline}", ""), ("p (paired runs)", ""),
                 (f"p ({study.per}, {correction_label(study)})", "")]
    head += [("setting", "text"), ("reproduce", "text")]
    lines = [f'<table class="sortable results" id="table-{_slug(table)}"><thead><tr>'
             + "".join(f'<th class="{cls}"><button type="button">{escape(h)}</button></th>' for h, cls in head)
             + "</tr></thead><tbody>"]
    for c in cells:
        target = href(c.ledgers[0], out) if c.ledgers else None
        if c.summary.get("summary_only"):  # run before ledgers existed: its seed summary is the record
            target = href(study.results / c.summary["summary_only"], out)
        state = ("" if c.runs else " (not run yet)") + (" ‡" if c.summary.get("summary_only") else "")
        state += "" if c.summary else " (not in the summary)"
        folds = "".join(f' <a class="fold" href="{escape(href(p, out))}">{escape(p.stem.rsplit("_", 1)[-1])}</a>'
                        for p in c.ledgers[1:]) if len(c.ledgers) > 1 else ""
        cells_html = [_td(f'{_link(c.name, target)}<span class="key">{escape(c.row + state)}</span>{folds}', c.name,
                          "text", raw=True, title=f"ledger: {c.ledgers[0] if c.ledgers else 'none yet'}"),
                      _td(str(c.runs), c.runs)]
        for m in study.metrics:
            mean = c.value(m)
            text = f"{fmt(mean)} ± {fmt(c.value(m + '_ci'))}" if c.runs else "–"
            cells_html.append(_td(_link(text, target), mean, raw=True))
            if paper[m]:
                cells_html += [_td(fmt(c.value("paper_" + m)), c.value("paper_" + m)),
                               _td(pct(c.value("gap_" + m)), c.value("gap_" + m))]
        cells_html += [_td(fmt(c.value("ref_" + m)), c.value("ref_" + m)) for m in ref]
        cells_html += [_td(fmt(c.value("sampled_" + m)), c.value("sampled_" + m)) for m in sampled]
        cells_html += [_td(column_text(m, c.value(m)), c.value(m)) for m in extra]
        if study.baseline:
            base = study.compared_with(c.table, c.row)
            recorded = " †" if "p_users" in (c.summary.get("recorded") or "") else ""
            if base is None:
                cells_html += [_td("baseline" if c.row == study.baseline_of(c.row) else "", NAN),
                               _td("", NAN), _td("", NAN)]
            else:
                versus = "" if base == study.baseline else f" (vs {base})"
                cells_html += [_td(pct(c.value("vs_baseline")) + versus, c.value("vs_baseline")),
                               _td(pval(c.value("p_seeds")), c.value("p_seeds")),
                               _td(pval(c.value("p_users_holm")) + recorded, c.value("p_users_holm"))]
        cells_html.append(_td(c.summary.get("setting") or "–", cls="text setting"))
        cells_html.append(_td(f"<code>{escape(command(study, c.table, c.row))}</code>", cls="text", raw=True))
        lines.append(f'<tr data-row="{escape(c.row)}">' + "".join(cells_html) + "</tr>")
    return "\n".join([*lines, "</tbody></table>"])


def view_tables(study: Study) -> list[str]:
    """The study's views that pair their rows with a baseline of their own (``results/<study>/views.csv``,
    written by the report): one sortable section each, the rows' metric and their tests against it."""
    path = study.folder / VIEWS
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        lines = list(csv.DictReader(f))
    metric = study.metric.split(":", 1)[-1]
    sections = []
    for title in dict.fromkeys(line["view"] for line in lines):
        members = [line for line in lines if line["view"] == title]
        base = next((m["name"] for m in members if m["row"] == m["baseline"]), members[0]["baseline"])
        adjusted = correction_label(study)
        head = [("row", "text"), ("runs", ""), (metric, ""), (f"{study.metric} vs {base}", ""),
                (f"p (paired runs, {adjusted})", ""), (f"p ({study.per}, {adjusted})", "")]
        html = [f'<table class="sortable results" id="view-{_slug(title)}"><thead><tr>'
                + "".join(f'<th class="{cls}"><button type="button">{escape(h)}</button></th>' for h, cls in head)
                + "</tr></thead><tbody>"]
        for m in members:
            n, mean = int(m["n"]), number(m[metric])
            change, seeds, users = number(m["vs_baseline"]), number(m["p_seeds_holm"]), number(m["p_users_holm"])
            own = m["row"] == m["baseline"]
            html.append(f'<tr data-row="{escape(m["row"])}">' + "".join([
                _td(m["name"] + ("" if n else " (not run yet)"), m["name"], "text"), _td(str(n), n),
                _td(f"{fmt(mean)} ± {fmt(number(m[metric + '_ci']))}" if n else "–", mean),
                _td("baseline" if own else pct(change), change), _td("" if own else pval(seeds), seeds),
                _td("" if own else pval(users), users)]) + "</tr>")
        html.append("</tbody></table>")
        sections.append(f'<section id="view-{_slug(title)}-section"><h2>{escape(title)}</h2><p class="note">'
                        f"Table {escape(members[0]['table'])}; each row paired with {escape(base)} by seed, "
                        f"{escape(adjusted)} over "
                        f'the rows with a test.</p><div class="wide">{"".join(html)}</div></section>')
    return sections


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in text)


def figures(data: StudyData, table: str) -> str:
    """The table's figures: the forest plot, the NDCG@K curves and the ours-vs-paper scatter (where each applies)."""
    study, cells = data.study, data.table(table)
    out = []
    diffs, notes = paired_differences(data, table)
    if diffs:
        caption = (f"Paired difference to the baseline on {study.metric} (ours minus baseline, metric units): mean "
                   "and 95% Student-t interval over the runs both made (paired by seed"
                   f"{' and ' + ', '.join(study.replicates) if study.replicates else ''}); filled where the "
                   "interval excludes zero.")
        if notes:
            caption += " Not drawn: " + "; ".join(notes) + "."
        out.append(_figure(forest(diffs, f"Δ {study.metric} vs baseline", f"{table}: difference to the baseline"),
                           caption))
    series = metric_curves(cells)
    if series:
        out.append(_figure(curves(series, "K", f"test {CURVE_METRIC.upper()}@K", f"{table}: NDCG@K against K"),
                           f"Test {CURVE_METRIC.upper()}@K against K (log scale), each row's mean over its runs."))
    points = paper_points(study, cells)
    if points:
        out.append(_figure(scatter(points, f"{table}: ours against the paper", study.paper_label),
                           f"Ours (mean, 95% interval) against the {study.paper_label}'s value; on the dashed "
                           "diagonal they agree."))
    return f'<div class="figures">{"".join(out)}</div>' if out else ""


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def study_page(data: StudyData, out: Path) -> str:
    """``<study>.html``: the header, each table with its figures, the method and the notes."""
    study = data.study
    body = [f"<p><a href=\"index.html\">← all studies</a></p><h1>{escape(study.title)}</h1>"]
    if study.source:
        body.append(f"<p>Source: {escape(study.source)}.</p>")
    links = []
    if data.summary is not None:
        links.append(f'<a href="{escape(href(data.summary, out))}">summary.csv</a>')
    markdown = PAGES_DIR / f"{study.name}.md"
    if markdown.is_file():
        links.append(f'<a href="{escape(href(markdown, out))}">markdown page</a>')
    body.append(f"<p>Reproduce: <code>{escape(command(study))}</code> (resumable), then "
                f"<code>{escape(shlex.join(['python', '-m', 'bench.study', study.name, 'report']))}</code>. "
                f"{' · '.join(links)}</p>")
    if data.summary is None:
        body.append(f'<p class="warn">No summary yet: run the study, then <code>python -m bench.study '
                    f'{escape(study.name)} report</code>.</p>')
    stale = [f"{c.table}/{c.row}" for c in data.cells if c.stale]
    if stale:
        body.append(f'<p class="warn">The summary is older than the ledgers of {escape(", ".join(stale))}: '
                    f"rewrite it with <code>python -m bench.study {escape(study.name)} report</code>.</p>")
    body.append("<nav>Tables: " + " · ".join(f'<a href="#{_slug(t)}">{escape(t)}</a>' for t in study.tables)
                + "</nav>")
    for table in study.tables:
        body.append(f'<section id="{_slug(table)}"><h2>{escape(table)}</h2>'
                    f"<p class=\"note\">Reproduce the table: <code>{escape(command(study, table))}</code>. "
                    "Click a column's name to sort by it.</p>"
                    f'<div class="wide">{results_table(data, table, out)}</div>{figures(data, table)}</section>')
    body += view_tables(study)
    over = "seeds × " + ", ".join(study.replicates) if study.replicates else "seeds"
    body.append(f'<p class="note">Mean ± 95% Student-t half width over the runs ({escape(over)}). Paired tests '
                f"against {escape(study.baseline or 'no baseline')}: t over the runs both made, Wilcoxon signed-rank "
                f"over {escape(study.per)} ({escape(correction_label(study))} over "
                f"{'the whole study' if study.holm == 'study' else 'each table'})."
                " ‡ a seed summary of runs made before ledgers existed (no paired test); † a p-value computed while "
                "the run folders existed. Each row's name and values link to its ledger.</p>")
    if study.notes:
        body.append(f'<p class="note">{escape(study.notes.strip())}</p>')
    return _html(study.title, body)


def index_page(studies: Sequence[StudyData], out: Path) -> str:
    """``index.html``: one line per study (title, source, tables, rows, runs, state), linked to its page."""
    rows = []
    for data in studies:
        s = data.study
        cells = sum(len(s.rows_of(t)) for t in s.tables)
        state = "no summary yet" if data.summary is None else (
            "summary older than ledgers" if any(c.stale for c in data.cells) else "reported")
        link = f'<a href="{escape(quote(s.name))}.html">{escape(s.title)}</a>'
        rows.append("<tr>" + _td(link, s.title, "text", raw=True) + _td(s.name, cls="text")
                    + _td(s.source, cls="text source") + _td(str(len(s.tables)), len(s.tables))
                    + _td(str(cells), cells) + _td(str(data.runs), data.runs) + _td(state, cls="text") + "</tr>")
    head = [("study", "text"), ("name", "text"), ("source", "text"), ("tables", ""), ("rows", ""), ("runs", ""),
            ("state", "text")]
    table = ('<table class="sortable" id="studies"><thead><tr>'
             + "".join(f'<th class="{cls}"><button type="button">{h}</button></th>' for h, cls in head)
             + "</tr></thead><tbody>" + "\n".join(rows) + "</tbody></table>")
    body = ["<h1>Top-K recommendation losses: studies</h1>",
            f'<p class="note">{len(studies)} declared studies (<code>conf/study/</code>); rows are table × row cells, '
            "runs the finished runs their summaries count. Click a column's name to sort by it.</p>", table]
    return _html("Studies", body)


def _html(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{escape(title)}</title>"
            f"<style>{CSS}</style></head>\n<body>\n" + "\n".join(body)
            + f"\n<script>{SCRIPT}</script>\n</body></html>\n")


def build_site(results: Path, out: Path, names: Sequence[str] | None = None) -> list[Path]:
    """Write ``out/index.html`` and ``out/<study>.html`` for every declared study (or ``names``).

    Args:
        results: the folder of the studies' records (normally the repository's ``results/``).
        out: where the pages go (created; other files there are left alone).

    Returns:
        The pages written, the index first.

    Raises:
        BenchError: ``results`` is no folder, or holds no study's summary (the commands to run said).
    """
    if not results.is_dir():
        raise BenchError(f"results folder {results} not found; it holds each study's results/<study>/ (ledgers and "
                         "summary.csv): run `python -m bench.study <name> run` then `python -m bench.study <name> "
                         "report` (`python -m bench.study list` names the studies), or pass the repository's results/")
    studies = [load(load_study(name, results=results)) for name in (names or known_studies())]
    if not any(d.summary is not None for d in studies):
        raise BenchError(f"{results} holds no study summary (results/<study>/summary.csv); write one with "
                         "`python -m bench.study <name> report`, or pass the repository's results/")
    out.mkdir(parents=True, exist_ok=True)
    pages = [(out / "index.html", index_page(studies, out))]
    pages += [(out / f"{d.study.name}.html", study_page(d, out)) for d in studies]
    for path, text in pages:
        path.write_text(text, encoding="utf-8")
    return [path for path, _ in pages]


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0 auto;max-width:1500px;
padding:12px 24px}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 4px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:6px 0 14px}
th,td{padding:3px 8px;border-bottom:1px solid #e2e2e2;text-align:right;white-space:nowrap;vertical-align:top}
th{background:#f4f6f8;position:sticky;top:0}th.text,td.text{text-align:left}
td.source{white-space:normal;min-width:260px;max-width:480px}td.setting{white-space:normal;max-width:320px}
th button{font:inherit;font-weight:600;background:none;border:0;padding:0;cursor:pointer;color:inherit}
th[aria-sort=ascending] button::after{content:" ▲"}th[aria-sort=descending] button::after{content:" ▼"}
tbody tr:hover td{background:#f3f7fc}
a.cell{color:inherit;text-decoration:none}a.cell:hover{text-decoration:underline}a.fold{font-size:11px}
.key{color:#777;font-size:11px;margin-left:6px}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f3f3f3;padding:1px 4px}
.wide{overflow-x:auto}.note{color:#555}.warn{background:#fff4d6;border-left:4px solid #e0a800;padding:6px 10px}
.figures{display:flex;flex-wrap:wrap;gap:28px;align-items:flex-start}
figure{margin:0;max-width:720px}figcaption{color:#555;font-size:12px;max-width:680px}svg.plot{max-width:100%;height:auto}
"""

#: click a column's name: sort the rows by its cells' data-sort numbers (its text where a cell has none),
#: ascending, then descending; blank numbers stay last either way
SCRIPT = """
(function () {
  function key(cell) {
    var s = cell.getAttribute("data-sort");
    if (s !== null) { return s === "" ? null : parseFloat(s); }
    return cell.textContent.trim().toLowerCase();
  }
  function order(a, b, sign) {
    if (a === null || b === null) { return a === b ? 0 : (a === null ? 1 : -1); }
    if (typeof a === "number" && typeof b === "number") { return sign * (a - b); }
    return sign * String(a).localeCompare(String(b));
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.querySelector("button").addEventListener("click", function () {
        var sign = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", sign > 0 ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) { return order(key(a.cells[col]), key(b.cells[col]), sign); });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""
