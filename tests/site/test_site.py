"""The static leaderboard (bench.site), built from the committed results/: every study listed and paged,
the tables' numbers those of the summaries, one forest mark per compared row, ledger links that resolve,
nothing fetched from elsewhere, one-line errors; and (slow) the pages in a real headless Chromium:
tables and plots drawn, columns sorting, no console error."""

from __future__ import annotations

import csv
import math
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from bench.site.__main__ import main
from bench.site.build import build_site
from bench.site.plots import Interval, forest, ticks
from bench.study.report import fmt
from bench.study.spec import RESULTS_DIR, known_studies

STUDY, TABLE, ROW, METRIC = "table2-mf", "health", "sl", "ndcg@20"


class Tables(HTMLParser):
    """A page's tables: {id: {"head": [header texts], "rows": {data-row: [cell texts]}, "order": [data-row]}}."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, dict] = {}
        self._table: dict | None = None
        self._row: list[str] | None = None
        self._key = ""
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(a.get("id") or str(len(self.tables)),
                                                 {"head": [], "rows": {}, "order": []})
        elif tag == "tr" and self._table is not None:
            self._row, self._key = [], a.get("data-row") or ""
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            if self._key:
                self._table["rows"][self._key] = self._row
                self._table["order"].append(self._key)
            elif not self._table["head"]:
                self._table["head"] = self._row
            self._row = None
        elif tag == "table":
            self._table = None


def tables_of(page: Path) -> dict[str, dict]:
    parser = Tables()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.tables


def summary_lines(study: str) -> list[dict[str, str]]:
    with (RESULTS_DIR / study / "summary.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def number(text: str) -> float:
    return float(text) if text else math.nan


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    build_site(RESULTS_DIR, out)
    return out


def test_index_lists_every_study_and_every_page_exists(site):
    index = (site / "index.html").read_text()
    for name in known_studies():
        assert f'href="{name}.html"' in index, name
        assert (site / f"{name}.html").is_file(), name
    assert len(tables_of(site / "index.html")["studies"]["head"]) == 7


def test_cells_are_the_summary_numbers_as_the_page_formats_them(site):
    line = next(x for x in summary_lines(STUDY) if (x["table"], x["row"]) == (TABLE, ROW))
    table = tables_of(site / f"{STUDY}.html")[f"table-{TABLE}"]
    cells = dict(zip(table["head"], table["rows"][ROW]))
    assert cells[METRIC] == f"{fmt(float(line[METRIC]))} ± {fmt(float(line[METRIC + '_ci']))}"
    assert cells["runs"] == line["n"]
    assert cells[f"paper {METRIC}"] == fmt(float(line["paper_" + METRIC]))
    assert cells["reproduce"] == f"python -m bench.study {STUDY} run --tables {TABLE} --rows {ROW}"


def test_rows_without_runs_and_seed_summaries_are_shown_as_such(site):
    tables = tables_of(site / f"{STUDY}.html")
    for key, line in ((x["row"], x) for x in summary_lines(STUDY) if x["table"] == "book"):
        cells = dict(zip(tables["table-book"]["head"], tables["table-book"]["rows"][key]))
        if line["n"] == "0":
            assert cells[METRIC] == "–" and "not run yet" in cells["row"], cells
    page = (site / f"{STUDY}.html").read_text()
    for line in summary_lines(STUDY):
        if line.get("summary_only"):  # runs made before ledgers: marked, and linked to their seed summary
            row = tables[f"table-{line['table']}"]["rows"][line["row"]]
            assert "‡" in row[0]
            assert quote(Path(line["summary_only"]).name) + '"' in page


def test_a_view_with_its_own_baseline_is_a_table_of_its_tests(site):
    """newest's "Does SL@20 still win?": every row of views.csv on the page, paired against SL@20, the
    Holm-adjusted p-values as the markdown page formats them."""
    from bench.site.build import _slug
    from bench.study.report import number, pct, pval

    with (RESULTS_DIR / "newest" / "views.csv").open(newline="") as handle:
        lines = list(csv.DictReader(handle))
    assert lines and {x["baseline"] for x in lines} == {"slk"}
    table = tables_of(site / "newest.html")[f"view-{_slug(lines[0]['view'])}"]
    assert table["order"] == [x["row"] for x in lines]
    assert table["head"][3] == "ndcg@20 vs SL@20"
    for x in lines:
        cells = table["rows"][x["row"]]
        if x["row"] == "slk":
            assert cells[3] == "baseline"
        elif x["n"] != "0":
            # a row with one seed has a change but no paired test yet: "–", as on the markdown page
            assert (x["p_seeds_holm"] == "") == (x["n"] == "1"), x
            assert cells[3] == pct(float(x["vs_baseline"])) and cells[4] == pval(number(x["p_seeds_holm"])), cells
    page = (RESULTS_DIR.parent / "docs" / "results" / "newest.md").read_text()
    sl = next(x for x in lines if x["row"] == "sl")
    assert f"| SL | {sl['n']} |" in page and pct(float(sl["vs_baseline"])) in page


def test_forest_plot_has_one_mark_per_compared_row(site):
    page = (site / f"{STUDY}.html").read_text()
    section = page.split(f'<section id="{TABLE}">')[1].split("</section>")[0]
    svg = re.search(r'<svg class="plot forest".*?</svg>', section, re.S)
    assert svg is not None
    compared = [x for x in summary_lines(STUDY) if x["table"] == TABLE and not math.isnan(number(x["p_seeds"]))]
    assert len(compared) > 5
    assert svg.group(0).count('<g class="mark">') == len(compared)
    assert svg.group(0).count('class="zero"') == 1
    for figure in ("curves", "scatter"):  # health's ledgers have NDCG@5..100; the paper gives its values
        assert f'<svg class="plot {figure}"' in section


def test_pages_are_self_contained_and_their_links_resolve(site):
    remote = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:[a-z]+:)?//""", re.I)
    for page in site.glob("*.html"):
        text = page.read_text()
        assert not remote.search(text), page.name
        assert "<link" not in text and "<script src" not in text and "@import" not in text and "url(" not in text
        for target in re.findall(r'href="([^"#]+)"', text):
            assert (site / unquote(target)).exists(), (page.name, target)


def test_text_is_escaped_and_ticks_are_round():
    svg = forest([Interval("<b>&x", -0.01, -0.02, 0.005, 3)], "Δ <m>", "t")
    assert "<b>" not in svg and "&lt;b&gt;&amp;x" in svg and "Δ &lt;m&gt;" in svg
    assert ticks(-0.031, 0.012) == [-0.03, -0.02, -0.01, 0.0, 0.01]


def exit_code(argv: list[str]) -> int | str | None:
    """``python -m bench.site argv``'s exit status (argparse's usage errors exit from inside)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("argv,words", [
    (["{tmp}/missing"], "python -m bench.study"),  # no results folder: says what to run
    (["{tmp}"], "summary.csv"),  # a folder without any study's summary
    ([str(RESULTS_DIR), "--studies", "nope"], "no study nope"),
    ([], "required"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, words):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv] + ["-o", str(tmp_path / "out")]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "out").exists()


#: Debian's /usr/bin/chromium is a shell wrapper: the real binary first
CHROMIUM = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str | None:
    for name in (os.environ.get("BENCH_CHROMIUM"), *CHROMIUM):
        found = name and (name if os.path.isfile(name) and os.access(name, os.X_OK) else shutil.which(name))
        if found:
            return found
    return None


@pytest.mark.slow
def test_pages_render_and_sort_in_headless_chromium(tmp_path):
    browser_path = chromium()
    if browser_path is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set BENCH_CHROMIUM)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    site = tmp_path / "site"
    build_site(RESULTS_DIR, site)
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((site / "index.html").as_uri())
        assert page.locator("#studies tbody tr").count() == len(known_studies())
        page.goto((site / f"{STUDY}.html").as_uri())
        for selector in (f"#table-{TABLE}", f"#{TABLE} svg.forest", f"#{TABLE} svg.curves", f"#{TABLE} svg.scatter"):
            box = page.locator(selector).first.bounding_box()
            assert box is not None and box["width"] > 50 and box["height"] > 50, selector
        assert page.locator("svg.plot").count() >= 3
        marks = page.locator(f"#{TABLE} svg.forest g.mark")
        assert all((marks.nth(i).bounding_box() or {}).get("height", 0) > 0 for i in range(marks.count()))

        table = page.locator(f"#table-{TABLE}")
        rows = lambda: table.locator("tbody tr").evaluate_all("rs => rs.map(r => r.dataset.row)")
        before = rows()
        column = table.locator("thead th").filter(has_text=METRIC).first
        index = column.evaluate("th => th.cellIndex")
        values = lambda: table.locator("tbody tr").evaluate_all(
            f"rs => rs.map(r => parseFloat(r.cells[{index}].dataset.sort))")
        column.locator("button").click()
        ascending = values()
        assert ascending == sorted(ascending) and rows() != before
        column.locator("button").click()
        assert values() == sorted(ascending, reverse=True)
        assert column.get_attribute("aria-sort") == "descending"
        browser.close()
    assert not errors, errors
