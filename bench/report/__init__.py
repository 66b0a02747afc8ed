"""``python -m bench.report``: compare losses across seeds, with paired tests against a baseline.

    python -m bench.report multirun/2026-11-30/10-00-00 [more run or sweep dirs]
        [--baseline sl] [--metrics recall@20 ndcg@20] [--out DIR]
    python -m bench.report --wandb ENTITY/PROJECT [--filter config.dataset.name=health]
    python -m bench.report path/to/sweep    # a sweep whose folders are gone: its committed ledger (runs.csv)

A run ledger's rows count as runs whose folders are gone: seed intervals and seed-paired tests,
no per-user tests.

One table per (dataset, model): rows = losses (and their variants), cells = mean ± CI
half-width (n seeds), the best bold, the paper's value when the runs came from a paper
experiment, and, with ``--baseline``, the relative change with significance marks.
Writes ``report.md``, ``report.csv``, ``report.tex`` and the plots to ``--out``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.report.make import Report, make_report
    from bench.report.runs import RunRecord, from_wandb
    from bench.report.tables import build

__all__ = ["Report", "make_report", "RunRecord", "from_wandb", "build"]

# The package's names load on first use (PEP 562): ``python -m bench.report`` imports this file before
# its command line, which answers a mistyped option before pandas, scipy and the losses are imported.
_HOME = {"Report": "make", "make_report": "make", "RunRecord": "runs", "from_wandb": "runs", "build": "tables"}


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'bench.report' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bench.report.{_HOME[name]}"), name)
