"""A report from run records: the tables, their Markdown and LaTeX, the files and the plots."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.report.render import legend, to_latex, to_markdown
from bench.report.runs import RunRecord, assign_labels
from bench.report.tables import build


@dataclass
class Report:
    table: pd.DataFrame
    markdown: str
    latex: str
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


def make_report(records: list[RunRecord], metrics: list[str], baseline: str | None = None, confidence: float = 0.95,
                alpha: float = 0.05, correction: str = "holm", out_dir: Path | None = None,
                plots: bool = True, plot_metric: str | None = None) -> Report:
    """Build the tables (and write them with the plots when ``out_dir`` is given)."""
    notes = assign_labels(records)
    table, more = build(records, metrics, baseline, confidence, alpha, correction)
    notes += more
    text = legend(confidence, alpha, correction, baseline if table["baseline"].astype(bool).any() else None,
                  one_seed=bool((table["n"] == 1).any()))
    report = Report(table, to_markdown(table, text), to_latex(table, text), notes)
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, content in (("report.md", report.markdown), ("report.tex", report.latex),
                              ("report.csv", table.to_csv(index=False))):
            (out_dir / name).write_text(content)
            report.files.append(out_dir / name)
        if plots:  # matplotlib only when drawing
            from bench.report.plots import write_plots

            report.files += write_plots(records, out_dir, plot_metric or _ndcg_metric(metrics), confidence)
    return report


def _ndcg_metric(metrics: list[str]) -> str:
    return next((m for m in metrics if m.startswith("ndcg@")), metrics[0])
