"""Every committed results page and summary is what its ledgers give today: a ledger row added
without ``python -m bench.study <name> report`` (or a report change not rerun) fails here."""

from __future__ import annotations

import pytest

from bench.study.report import VIEWS, compute, page, view_tests, views_frame
from bench.study.spec import PAGES_DIR, known_studies, load_study


@pytest.mark.parametrize("name", known_studies())
def test_the_committed_page_is_the_ledgers_report(name):
    study = load_study(name)
    rows = compute(study)
    tests = view_tests(study, rows)
    written = (PAGES_DIR / f"{name}.md").read_text()
    assert page(study, rows, tests) == written, f"run: python -m bench.study {name} report"
    views = views_frame(study, rows, tests)  # the leaderboard's view tables
    if not views.empty:
        assert views.to_csv(index=False) == (study.folder / VIEWS).read_text(), \
            f"run: python -m bench.study {name} report"
