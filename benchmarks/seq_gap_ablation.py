"""Why SL@20 trails SL with SASRec on MovieLens-100K: an ablation, not a guess.

Each cell is SASRec on ``ml100k-seq`` (leave-one-out, full ranking) with one change; all cells
share everything else (the model's defaults, N = 1000 negatives per position, Adam 0.001,
``--epochs`` epochs, validation every 5) and run the same seeds:

- ``sl``: SL, tau 0.2 (the reference point)
- ``slk``: SL@20 as configured (tau_d 0.2, tau_w 2.5, the exact K-th score of each prefix as threshold)
- ``slk-tauw10`` / ``slk-tauw0.5``: a flatter / sharper weight (tau_w 10 makes it nearly constant)
- ``slk-detach``: the weight without its gradient (``loss.detach_weight=true``)
- ``slk-user``: one threshold per user from its whole training history, refreshed every 5th epoch by
  the sampled estimator as in collaborative filtering, instead of each prefix's exact K-th score
  (``loss.seq_threshold=user``)
- ``slk-long`` / ``sl-long``: three times the epochs (is SL@20 still learning?)

    BENCH_DATA_DIR=../shared/data python benchmarks/seq_gap_ablation.py run [--cells sl slk ...] [--seeds 0,1,2]
    python benchmarks/seq_gap_ablation.py report [--out benchmarks/results/seq/ml100k-gap]

``run`` skips completed runs and resumes interrupted ones; ``report`` writes ``summary.md`` /
``summary.csv``: per cell Hit@20 and NDCG@20 (mean ± 95% t-interval over seeds), the change
against SL with a paired t-test over seeds, the best validation epoch and the validation NDCG@20
at epochs 50 and 100 (from each run's history).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bench.report.stats import t_interval
from bench.results import COMPLETED, RunResult, finish_run

BASE = ["task=seq", "model=sasrec", "dataset=ml100k-seq", "trainer.check_val_every_n_epoch=5", "logger=csv"]
CELLS: dict[str, list[str]] = {
    "sl": ["loss=sl"],
    "slk": ["loss=slk"],
    "slk-tauw10": ["loss=slk", "loss.tau_w=10"],
    "slk-tauw0.5": ["loss=slk", "loss.tau_w=0.5"],
    "slk-detach": ["loss=slk", "loss.detach_weight=true"],
    "slk-user": ["loss=slk", "loss.seq_threshold=user"],
    "slk-long": ["loss=slk"],
    "sl-long": ["loss=sl"],
}
METRICS = ("hit@20", "ndcg@20")


def epochs_of(cell: str, epochs: int) -> int:
    return 3 * epochs if cell.endswith("-long") else epochs


def run(cells: list[str], seeds: list[int], epochs: int, runs: Path) -> None:
    for seed in seeds:  # seed-major: every cell gets its first seed before any gets a second
        for cell in cells:
            finish_run(runs / cell / f"seed{seed}",
                       [*BASE, *CELLS[cell], f"trainer.max_epochs={epochs_of(cell, epochs)}", f"seed={seed}"])


def validation_at(res: RunResult, epoch: int) -> float:
    """Validation NDCG@20 at the last validation at or before ``epoch`` (0-based epochs)."""
    rows = [h for h in res.history if h.get("epoch", math.inf) <= epoch and "val/ndcg@20" in h]
    return float(rows[-1]["val/ndcg@20"]) if rows else math.nan


def report(runs: Path, out: Path) -> str:
    results: dict[str, dict[int, RunResult]] = {}
    for cell in CELLS:
        for folder in sorted((runs / cell).glob("seed*")):
            if (folder / "results.json").exists():
                res = RunResult.read(folder)
                if res.status == COMPLETED:
                    results.setdefault(cell, {})[res.seed] = res
    rows = []
    base = results.get("sl", {})
    for cell, by_seed in results.items():
        row: dict = {"cell": cell, "overrides": " ".join(CELLS[cell][1:]) or "-", "seeds": len(by_seed)}
        for m in METRICS:
            ci = t_interval(r.test[m] for r in by_seed.values())
            row[m], row[m + "_ci"] = ci["mean"], ci["ci_half"]
            pairs = sorted(set(by_seed) & set(base))
            if cell != "sl" and len(pairs) >= 2:
                x = np.array([by_seed[s].test[m] for s in pairs])
                y = np.array([base[s].test[m] for s in pairs])
                row[m + "_vs_sl"] = float(x.mean() / y.mean() - 1)
                row[m + "_p"] = float(stats.ttest_rel(x, y).pvalue)
        row["best_epoch"] = float(np.mean([r.best.get("epoch", math.nan) for r in by_seed.values()]))
        for e in (49, 99):
            row[f"val_ndcg@20_e{e + 1}"] = float(np.mean([validation_at(r, e) for r in by_seed.values()]))
        rows.append(row)
    table = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "summary.csv", index=False)
    lines = ["| cell | change | seeds | Hit@20 | NDCG@20 | NDCG@20 vs SL (p) | best epoch | val NDCG@20 at 50 / 100 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        vs = "" if "ndcg@20_vs_sl" not in r else f"{r['ndcg@20_vs_sl']:+.1%} ({r['ndcg@20_p']:.2g})"
        lines.append(f"| {r['cell']} | {r['overrides']} | {r['seeds']} | {r['hit@20']:.4f} ± {r['hit@20_ci']:.4f} | "
                     f"{r['ndcg@20']:.4f} ± {r['ndcg@20_ci']:.4f} | {vs} | {r['best_epoch']:.0f} | "
                     f"{r['val_ndcg@20_e50']:.4f} / {r['val_ndcg@20_e100']:.4f} |")
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["run", "report"])
    parser.add_argument("--cells", nargs="*", default=[c for c in CELLS if not c.endswith("-long")],
                        choices=list(CELLS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--runs", type=Path, default=Path("seq-gap-runs"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/seq/ml100k-gap"))
    args = parser.parse_args()
    if args.stage == "run":
        run(args.cells, [int(s) for s in args.seeds.split(",")], args.epochs, args.runs)
    else:
        print(report(args.runs, args.out), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
