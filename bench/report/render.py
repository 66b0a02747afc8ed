"""Markdown and LaTeX renderings of :func:`bench.report.tables.build`'s long table."""

from __future__ import annotations

import math

import pandas as pd

from bench.report.tables import SIG_MARKS


def _num(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"


def _pct(x: float) -> str:
    if x is None or math.isnan(x):
        return "–"
    pct = round(100 * x, 1) + 0.0  # + 0.0: no "-0.0%" from rounding noise
    return f"{pct:+.1f}%"


def _cell(r: pd.Series, pm: str, bold: tuple[str, str]) -> str:
    text = f"{_num(r['mean'])} {pm} {_num(r['ci_half'])} ({int(r['n'])})" if r["n"] > 1 else \
        f"{_num(r['mean'])} ({int(r['n'])})"
    return f"{bold[0]}{text}{bold[1]}" if r["best"] else text


def _marks(r: pd.Series) -> str:
    return (SIG_MARKS["seed"] if r.get("sig_seed") is True else "") + \
        (SIG_MARKS["user"] if r.get("sig_user") is True else "")


def _layout(frame: pd.DataFrame):
    """Per table: (title, metrics, row labels, {(row, metric): series}, baseline label, has paper,
    {row: the paper's name of the row})."""
    for (task, dataset, model), t in frame.groupby(["task", "dataset", "model"], sort=False):
        metrics = list(dict.fromkeys(t["metric"]))
        rows = list(dict.fromkeys(t["row"]))
        cells = {(r["row"], r["metric"]): r for _, r in t.iterrows()}
        names = dict(zip(t["row"], t["name"])) if "name" in t else {}
        base = next((b for b in t["baseline"] if b), None)
        title = f"{dataset} · {model}" + ("" if task == "cf" else f" ({task})")
        yield title, metrics, rows, cells, base, bool(t["paper"].notna().any()), names


def legend(confidence: float, alpha: float, correction: str, baseline: str | None, one_seed: bool = False) -> str:
    """The note under a report's tables; ``one_seed``: some cell holds a single seed (no interval)."""
    text = (f"mean ± {confidence:.0%} CI half-width (n seeds), Student t over seeds; bold: best mean.")
    if one_seed:
        text += " A cell with (1) is one seed's value: no interval and no seed test until more seeds run."
    if baseline:
        adj = {"holm": " after Holm correction", "bonferroni": " after Bonferroni correction",
               "bh": " after Benjamini-Hochberg (false discovery rate) correction"}.get(correction, "")
        adj += " over the rows of each table" if adj else ""
        text += (f" vs {baseline}: relative change of the mean; {SIG_MARKS['seed']} paired t-test across seeds, "
                 f"{SIG_MARKS['user']} paired t-test and Wilcoxon signed-rank across test users (each user's metric "
                 f"averaged over the shared seeds), two-sided, p < {alpha}{adj}; the sign gives the direction.")
    return text


def _grid(title_metrics_rows, pm: str, bold: tuple[str, str], esc, marks: dict[str, str], suffix: str):
    """(header, body rows) of one table, shared by the Markdown and LaTeX renderings."""
    _, metrics, rows, cells, base, has_paper, names = title_metrics_rows
    head = ["loss", *metrics] + ([f"paper {m}" for m in metrics] if has_paper else []) + \
        ([f"vs {base}: {m}" for m in metrics] if base else [])
    body = []
    for row in rows:
        cols = [esc(names.get(row, row)) + (suffix if row == base else "")]
        cols += [_cell(cells[(row, m)], pm, bold) if (row, m) in cells else "–" for m in metrics]
        if has_paper:
            for m in metrics:
                r = cells.get((row, m))
                cols.append("–" if r is None or math.isnan(r["paper"]) else
                            f"{_num(r['paper'])} ({esc(_pct(r['paper_gap']))})")
        if base:
            for m in metrics:
                r = cells.get((row, m))
                cols.append("–" if r is None or row == base else
                            esc(_pct(r["rel_change"])) + "".join(marks[c] for c in _marks(r)))
        body.append(cols)
    return [esc(h) for h in head], body


def to_markdown(frame: pd.DataFrame, legend_text: str) -> str:
    lines = []
    for layout in _layout(frame):
        head, body = _grid(layout, "±", ("**", "**"), str, {c: c for c in SIG_MARKS.values()}, " (baseline)")
        lines += [f"### {layout[0]}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(cols) + " |" for cols in body]
        lines.append("")
    lines.append(legend_text)
    return "\n".join(lines) + "\n"


def _tex(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                 ("$", r"\$"), ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\^{}")):
        text = text.replace(a, b)
    return text


def to_latex(frame: pd.DataFrame, legend_text: str) -> str:
    """One booktabs ``table`` per (dataset, model); needs ``\\usepackage{booktabs}``."""
    out = []
    marks = {SIG_MARKS["seed"]: r"$^{*}$", SIG_MARKS["user"]: r"$^{\dagger}$"}
    for layout in _layout(frame):
        head, body = _grid(layout, r"$\pm$", (r"\textbf{", "}"), _tex, marks, "")
        out += [r"\begin{table}[t]", r"\centering", rf"\caption{{{_tex(layout[0])}}}",
                r"\begin{tabular}{l" + "r" * (len(head) - 1) + "}", r"\toprule", " & ".join(head) + r" \\",
                r"\midrule"]
        out += [" & ".join(cols) + r" \\" for cols in body]
        out += [r"\bottomrule", r"\end{tabular}", "", r"\smallskip", _tex(legend_text),
                r"\end{table}", ""]
    text = "\n".join(out)
    # plain-ASCII LaTeX: no inputenc or font package needed for the symbols
    for a, b in (("±", r"$\pm$"), ("†", r"$^{\dagger}$"), ("–", "--"), ("·", "/"), (" < ", r" $<$ ")):
        text = text.replace(a, b)
    return text
