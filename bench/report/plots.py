"""Report figures: validation curves with seed CI bands, and the metric across cut-offs K."""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from bench.report.runs import RunRecord  # noqa: E402
from bench.report.stats import t_interval  # noqa: E402


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9@.-]+", "_", text).strip("_")


def validation_curve(rows: dict[str, list[RunRecord]], metric: str, confidence: float = 0.95):
    """Per row: (epochs, mean, low, high) of ``val/<metric>`` over the seeds that validated at each epoch."""
    curves = {}
    for label, runs in rows.items():
        by_epoch: dict[int, list[float]] = {}
        for r in runs:
            for h in r.history:
                v = h.get(f"val/{metric}")
                if v is not None and h.get("epoch") is not None:
                    by_epoch.setdefault(int(h["epoch"]), []).append(float(v))
        if not by_epoch:
            continue
        epochs = np.array(sorted(by_epoch))
        ci = [t_interval(by_epoch[e], confidence) for e in epochs]
        mean = np.array([c["mean"] for c in ci])
        half = np.array([0.0 if math.isnan(c["ci_half"]) else c["ci_half"] for c in ci])
        curves[label] = (epochs + 1, mean, mean - half, mean + half)  # epochs counted from 1 on the axis
    return curves


def across_k(rows: dict[str, list[RunRecord]], metric: str, confidence: float = 0.95):
    """Per row: (K values, mean, CI half-width) of the test metric ``<metric>@K``."""
    out = {}
    for label, runs in rows.items():
        ks = sorted({int(k.split("@")[1]) for r in runs for k in r.test if k.split("@")[0] == metric})
        if not ks:
            continue
        ci = [t_interval([r.test[f"{metric}@{k}"] for r in runs if f"{metric}@{k}" in r.test], confidence)
              for k in ks]
        out[label] = (np.array(ks), np.array([c["mean"] for c in ci]),
                      np.array([0.0 if math.isnan(c["ci_half"]) else c["ci_half"] for c in ci]))
    return out


def write_plots(records: list[RunRecord], out_dir: Path, metric: str = "ndcg@20", confidence: float = 0.95,
                formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    """Two figures per (task, dataset, model): validation ``metric`` vs epoch, and the test
    metric family (e.g. NDCG) across K. Returns the files written."""
    tables: dict[tuple, dict[str, list[RunRecord]]] = {}
    for r in records:
        tables.setdefault(r.table, {}).setdefault(r.label, []).append(r)
    family = metric.split("@")[0]
    written = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for (task, dataset, model), rows in sorted(tables.items()):
        stem = _slug(f"{dataset}_{model}" + ("" if task == "cf" else f"_{task}"))
        figures = []
        curves = validation_curve(rows, metric, confidence)
        if curves:
            fig, ax = plt.subplots(figsize=(6, 4))
            for label, (x, mean, low, high) in sorted(curves.items()):
                line, = ax.plot(x, mean, label=label)
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
            ax.set(xlabel="epoch", ylabel=f"validation {metric}", title=f"{dataset} · {model}: validation {metric}")
            figures.append((fig, ax, f"val_{_slug(metric)}_{stem}"))
        ks = across_k(rows, family, confidence)
        if ks:
            fig, ax = plt.subplots(figsize=(6, 4))
            for label, (x, mean, half) in sorted(ks.items()):
                ax.errorbar(x, mean, yerr=half, marker="o", capsize=3, label=label)
            ax.set_xscale("log")
            ax.set_xticks(sorted({int(k) for v in ks.values() for k in v[0]}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set(xlabel="K", ylabel=f"test {family}@K", title=f"{dataset} · {model}: test {family}@K")
            figures.append((fig, ax, f"test_{family}_at_k_{stem}"))
        for fig, ax, name in figures:
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
            fig.tight_layout()
            for fmt in formats:
                path = out_dir / f"{name}.{fmt}"
                fig.savefig(path, dpi=120)
                written.append(path)
            plt.close(fig)
    return written
