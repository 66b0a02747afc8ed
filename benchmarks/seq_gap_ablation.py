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
        [--runs seq-gap-runs] [--ledger benchmarks/results/seq/ml100k-gap]
    python benchmarks/seq_gap_ablation.py report [--out benchmarks/results/seq/ml100k-gap]

``run`` skips the runs its committed ledgers hold (``<ledger>/<cell>.csv``, one row per finished
run, with the validation NDCG@20 at epochs 50, 100 and 300 from the run's history) and resumes
interrupted ones, so the cells can be spread over sittings and machines; ``report`` reads only the
ledgers and writes ``summary.md`` / ``summary.csv``: per cell Hit@20 and NDCG@20 (mean ± 95%
t-interval over seeds), the change against SL with a paired t-test over seeds, the best validation
epoch and the validation NDCG@20 at epochs 50 and 100 (300 for the long cells).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bench.records import RunResult
from bench.records.ledger import read_ledger
from bench.report.stats import t_interval
from bench.resumable import finish_recorded

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
#: the epochs whose validation NDCG@20 goes into the ledger: is a cell still learning?
CURVE_EPOCHS = (50, 100, 300)


def epochs_of(cell: str, epochs: int) -> int:
    return 3 * epochs if cell.endswith("-long") else epochs


def run(cells: list[str], seeds: list[int], epochs: int, runs: Path, ledger: Path) -> None:
    for seed in seeds:  # seed-major: every cell gets its first seed before any gets a second
        for cell in cells:
            finish_recorded(runs / cell / f"seed{seed}",
                            [*BASE, *CELLS[cell], f"trainer.max_epochs={epochs_of(cell, epochs)}", f"seed={seed}"],
                            ledger / f"{cell}.csv", extra=curve)


def validation_at(res: RunResult, epochs: int) -> float:
    """Validation NDCG@20 at the last validation within the first ``epochs`` epochs (after early
    stopping, the last one held); NaN when the run was set to fewer epochs. History epochs count from 0."""
    if int((res.config.get("trainer") or {}).get("max_epochs", 0)) < epochs:
        return math.nan
    rows = [h for h in res.history if h.get("epoch", math.inf) < epochs and "val/ndcg@20" in h]
    return float(rows[-1]["val/ndcg@20"]) if rows else math.nan


def curve(res: RunResult) -> dict[str, float]:
    """The run's ledger columns ``curve/val_ndcg@20_e<E>`` for :data:`CURVE_EPOCHS`."""
    return {f"curve/val_ndcg@20_e{e}": validation_at(res, e) for e in CURVE_EPOCHS}


def report(ledger: Path, out: Path) -> str:
    by_cell = {cell: {int(r["seed"]): r for r in read_ledger(ledger / f"{cell}.csv")}  # type: ignore[call-overload]
               for cell in CELLS}
    rows = []
    base = by_cell["sl"]
    for cell, by_seed in by_cell.items():
        if not by_seed:
            continue
        row: dict = {"cell": cell, "overrides": " ".join(CELLS[cell][1:]) or "-", "seeds": len(by_seed)}
        reference = by_cell["sl-long"] if cell == "slk-long" else base
        for m in METRICS:
            ci = t_interval(float(r[f"test/{m}"]) for r in by_seed.values())  # type: ignore[arg-type]
            row[m], row[m + "_ci"] = ci["mean"], ci["ci_half"]
            pairs = sorted(set(by_seed) & set(reference))
            if cell not in ("sl", "sl-long") and len(pairs) >= 2:
                x = np.array([by_seed[s][f"test/{m}"] for s in pairs], dtype=float)
                y = np.array([reference[s][f"test/{m}"] for s in pairs], dtype=float)
                row[m + "_vs_sl"] = float(x.mean() / y.mean() - 1)
                row[m + "_p"] = float(stats.ttest_rel(x, y).pvalue)
        row["best_epoch"] = float(np.mean([float(r["best_epoch"]) for r in by_seed.values()]))  # type: ignore[arg-type]
        for e in CURVE_EPOCHS:
            row[f"val_ndcg@20_e{e}"] = float(np.mean([r.get(f"curve/val_ndcg@20_e{e}", math.nan)
                                                      for r in by_seed.values()]))
        rows.append(row)
    table = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "summary.csv", index=False)
    lines = ["| cell | change | seeds | Hit@20 | NDCG@20 | NDCG@20 vs SL (p) | best epoch | "
             "val NDCG@20 at 50 / 100 / 300 |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        vs = "" if "ndcg@20_vs_sl" not in r else f"{r['ndcg@20_vs_sl']:+.1%} ({r['ndcg@20_p']:.2g})"
        at = " / ".join("-" if math.isnan(r[f"val_ndcg@20_e{e}"]) else f"{r[f'val_ndcg@20_e{e}']:.4f}"
                        for e in CURVE_EPOCHS)
        lines.append(f"| {r['cell']} | {r['overrides']} | {r['seeds']} | {r['hit@20']:.4f} ± {r['hit@20_ci']:.4f} | "
                     f"{r['ndcg@20']:.4f} ± {r['ndcg@20_ci']:.4f} | {vs} | {r['best_epoch']:.0f} | {at} |")
    lines.append("\nThe long cells run three times the epochs; slk-long is compared with sl-long.")
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
    parser.add_argument("--ledger", type=Path, default=Path("benchmarks/results/seq/ml100k-gap"),
                        help="where the committed run ledgers go (<cell>.csv)")
    args = parser.parse_args()
    if args.stage == "run":
        run(args.cells, [int(s) for s in args.seeds.split(",")], args.epochs, args.runs, args.ledger)
    else:
        print(report(args.ledger, args.out), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
