"""Every number the README's results tables held before the studies took them over (the README
as it was before issue 43, frozen in ``tests/data/readme_before_issue43.md``) appears in the pages
``python -m bench.study <name> report`` generates, at the README's precision.

Each old table is mapped to the study pages that now hold it. A number is found when a number of
those pages rounds to it at the digits the README printed (``.1271`` is found in ``.1271 ± .0014``;
``2·10⁻¹⁴`` in ``1.6·10⁻¹⁴``; ``+142%`` in ``+141.6%``). Counts without a decimal point or a
percent sign (seeds, users) are not results and are left out. What no page can hold is listed in
``NOT_ON_PAGES`` with the place that keeps it, and that place is checked instead.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
OLD = (REPO / "tests" / "data" / "readme_before_issue43.md").read_text().splitlines()
PAGES = REPO / "docs" / "results"

#: the old README's results tables (the line of each header) -> the study pages that hold them
TABLES = {
    91: ["table2-mf", "negatives", "table2-lightgcn", "table2-xsimgcl"],   # the Table 2 cells
    145: ["table2-lightgcn"],
    172: ["table2-xsimgcl"],
    227: ["table18"],
    298: ["table2-mf"],                      # Table 3: a view of the Health runs
    312: ["table2-mf"],                      # Table 4
    336: ["figure3"],
    370: ["table7"],
    390: ["seq-gap"],
    423: ["table6"],
    442: ["table6"],
    469: ["table5"],
    492: ["table5"],
    529: ["table2-mf"],                      # an example of bench.report's output: the Health runs
    756: ["estimators"],
}
#: tables of the old README that are no study's results, and the file that carries them unchanged
ELSEWHERE = {
    721: REPO / "docs" / "thresholds.md",    # the estimators measured offline (python -m bench.thresholds)
}
#: (line, number as printed) -> why no generated page shows it, and what holds it instead (a check)
NOT_ON_PAGES: dict[tuple[int, str], tuple[str, Callable[[float, float], bool]]] = {}


def _in_file(path: Path) -> Callable[[float, float], bool]:
    return lambda value, half: any(abs(abs(v) - abs(value)) <= half * (1 + 1e-9) for v, *_ in numbers(path.read_text()))


def _beauty_bce_holm_of_two(value: float, half: float) -> bool:
    summary = pd.read_csv(REPO / "results" / "table6" / "summary.csv").set_index(["table", "row"])
    return abs(2 * summary.at[("beauty", "bce"), "p_users"] - value) <= half


NOT_ON_PAGES.update({
    (377, "4·10⁻⁴"): ("a per-node test of a metric compared besides the table's (Hit@20); pages show the per-node "
                      "test of the table's metric",
                      _in_file(REPO / "results" / "table2-mf" / "comparisons" / "table7-linkpred.md")),
    (425, "3·10⁻²⁰⁸"): ("Holm over Beauty's two comparisons, from when Table 6 had Beauty only; the page applies Holm "
                        "over the study's four (and shows the unadjusted p)", _beauty_bce_holm_of_two),
})

SUP = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")
NUMBER = re.compile(r"(?<![\w.·])([+−-]?)(\d[\d,]*\.?\d*|\.\d+)(?:·10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+))?(%?)")


def numbers(text: str) -> list[tuple[float, float, str, bool]]:
    """(value, half a unit of the last printed digit, the text, is a percentage) for each number."""
    out = []
    for match in NUMBER.finditer(text.replace("**", "")):
        sign, digits, exponent, percent = match.groups()
        digits = digits.replace(",", "")
        if "." not in digits and not percent and not exponent:
            continue
        value = float(digits) * (10.0 ** int(exponent.translate(SUP)) if exponent else 1.0)
        value = -value if sign in ("−", "-") and sign else value
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        half = 0.5 * 10.0 ** -decimals * (10.0 ** int(exponent.translate(SUP)) if exponent else 1.0)
        out.append((value, half, match.group(0), bool(percent)))
    return out


def _table_rows(header_line: int) -> list[tuple[int, list[str]]]:
    rows, n = [], header_line + 1  # the separator line follows the header
    while n < len(OLD) and OLD[n].startswith("|"):
        rows.append((n + 1, [c.strip() for c in OLD[n].strip().strip("|").split("|")]))
        n += 1
    return rows


def _page_numbers(studies: list[str]) -> dict[bool, list[float]]:
    found: dict[bool, list[float]] = {False: [], True: []}
    for study in studies:
        for value, _, _, percent in numbers((PAGES / f"{study}.md").read_text()):
            found[percent].append(value)
            found[percent].append(abs(value))  # a change printed with its sign, quoted without
    return {k: sorted(v) for k, v in found.items()}


def _present(value: float, half: float, sorted_values: list[float]) -> bool:
    slack = half * (1 + 1e-9)  # a value printed as exactly half a unit off rounds either way
    i = bisect.bisect_left(sorted_values, value - slack)
    return i < len(sorted_values) and sorted_values[i] <= value + slack


def test_the_frozen_readme_is_the_one_before_the_studies():
    assert len(OLD) == 1332
    for line in [*TABLES, *ELSEWHERE]:
        assert OLD[line - 1].startswith("| ") and set(OLD[line]) <= set("|-: "), line


@pytest.mark.parametrize("header", sorted(TABLES))
def test_every_number_of_an_old_results_table_is_on_its_study_pages(header):
    pages = _page_numbers(TABLES[header])
    missing = []
    for line, cells in _table_rows(header):
        for cell in cells[1:]:  # the first cell names the row
            for value, half, text, percent in numbers(cell):
                if (line, text.lstrip("+−-")) in NOT_ON_PAGES:
                    continue
                if not _present(value, half, pages[percent]):
                    missing.append(f"line {line}: {text}")
    assert not missing, f"{TABLES[header]} lack {len(missing)}: {missing[:20]}"


@pytest.mark.parametrize("header", sorted(ELSEWHERE))
def test_an_old_table_that_is_no_study_is_carried_unchanged(header):
    kept = ELSEWHERE[header].read_text()
    for line, _ in _table_rows(header):
        assert OLD[line - 1] in kept, f"line {line} of the old README is not in {ELSEWHERE[header]}"


def test_what_no_page_shows_is_held_where_the_list_says():
    for (line, text), (_, holds) in NOT_ON_PAGES.items():
        assert text in OLD[line - 1], (line, text)
        value, half, _, _ = numbers(text)[0]
        assert holds(value, half), f"{text} (line {line})"


def test_the_matcher_respects_the_printed_precision():
    found = numbers(".1271 ± .0014 (paper .1234, +3.0%) 1.6·10⁻¹⁴ +141.6%")
    plain = sorted(v for v, _, _, percent in found if not percent)
    percents = sorted(v for v, _, _, percent in found if percent)
    for text, expect in ((".1271", True), (".127", True), (".1272", False), ("2·10⁻¹⁴", True),
                         ("3·10⁻¹⁴", False), ("0.0014", True), ("+142%", True), ("+141%", False), ("+3%", True)):
        value, half, _, percent = numbers(text)[0]
        assert _present(value, half, percents if percent else plain) is expect, text
