"""Every committed results page and summary is what its ledgers give today: a ledger row added
without ``python -m bench.study <name> report`` (or a report change not rerun) fails here."""

from __future__ import annotations

import pytest

from bench.study.report import compute, page
from bench.study.spec import PAGES_DIR, known_studies, load_study


@pytest.mark.parametrize("name", known_studies())
def test_the_committed_page_is_the_ledgers_report(name):
    study = load_study(name)
    written = (PAGES_DIR / f"{name}.md").read_text()
    assert page(study, compute(study)) == written, f"run: python -m bench.study {name} report"
