"""Does a comparison survive the tie rule? Finished runs tested again under every ``eval.ties`` rule.

For each run (any folders holding completed runs; the loss is read from each run), the best
checkpoint is tested again (``bench.analysis.checkpoints.retest``) under ``expected``,
``lowest_id``, ``optimistic`` and ``pessimistic``; link-prediction runs also get the per-edge
protocol's MRR. Writes, per metric, mean ± 95% CI over seeds for each loss and rule, and the
second loss's change over the first with a paired t-test over seeds, per rule.

    python benchmarks/ties_study.py RUN_DIRS... [--losses sl slk] [--metrics ndcg@20 mrr@100 hit@20]
        [--out benchmarks/results/ties/cora]

The Cora runs: ``python -m bench task=linkpred model=gnn dataset=cora loss=sl|slk seed=0|1|2``.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bench.analysis.checkpoints import load_model, retest, run_datamodule
from bench.evaluation.per_edge import edge_summary
from bench.evaluation.ties import TIE_MODES
from bench.records import COMPLETED, RunResult, find_runs
from bench.report.stats import t_interval

NAMES = {"sl": "SL", "slk": "SL@20"}


def per_edge_mrr(res: RunResult) -> float:
    """The per-edge filtered MRR of a link-prediction run's best checkpoint (expected ties)."""
    datamodule = run_datamodule(res)
    model = load_model(res, res.best_checkpoint, datamodule.train_data)
    return float(edge_summary(datamodule.test_evaluator.evaluate(model.full_scorer("test"))).get("mrr", np.nan))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--losses", nargs=2, default=["sl", "slk"])
    parser.add_argument("--metrics", nargs="*", default=["ndcg@20", "mrr@100", "hit@20", "recall@20"])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/ties/cora"))
    args = parser.parse_args()
    runs, _ = find_runs(args.runs)
    runs = [r for r in runs if r.status == COMPLETED and r.config["loss"]["name"] in args.losses]
    values: dict[tuple[str, str, str], dict[int, float]] = defaultdict(dict)  # (loss, rule, metric) -> seed -> mean
    cut: dict[str, list[float]] = defaultdict(list)
    for res in runs:
        loss = res.config["loss"]["name"]
        for rule in TIE_MODES:
            _, metrics, ties = retest(res, [f"eval.ties={rule}"])
            for m in args.metrics:
                values[(loss, rule, m)][res.seed] = float(metrics[m].mean())
            if rule == "expected":
                cut[loss].append(max(ties.get("cut_in_tie", {}).values(), default=0) / max(ties.get("queries", 1), 1))
        if res.config["task"]["name"] == "linkpred":
            values[(loss, "expected", "per-edge mrr")][res.seed] = per_edge_mrr(res)
    metrics = [*args.metrics, *(["per-edge mrr"] if any(k[2] == "per-edge mrr" for k in values) else [])]
    rows = []
    a, b = args.losses
    for m in metrics:
        for rule in TIE_MODES:
            if (a, rule, m) not in values:
                continue
            row = {"metric": m, "rule": rule}
            for loss in (a, b):
                ci = t_interval(values[(loss, rule, m)].values())
                row[f"{loss}"], row[f"{loss}_ci"], row[f"{loss}_seeds"] = ci["mean"], ci["ci_half"], ci["n"]
            seeds = sorted(set(values[(a, rule, m)]) & set(values[(b, rule, m)]))
            x = np.array([values[(b, rule, m)][s] for s in seeds])
            y = np.array([values[(a, rule, m)][s] for s in seeds])
            row["change"] = float(x.mean() / y.mean() - 1) if len(seeds) else np.nan
            row["p_seeds"] = float(stats.ttest_rel(x, y).pvalue) if len(seeds) >= 2 else np.nan
            rows.append(row)
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "summary.csv", index=False)
    lines = [f"| metric | tie rule | {NAMES.get(a, a)} | {NAMES.get(b, b)} | {NAMES.get(b, b)} vs {NAMES.get(a, a)} | "
             "p (paired seeds) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['metric']} | {r['rule']} | {r[a]:.4f} ± {r[a + '_ci']:.4f} | "
                     f"{r[b]:.4f} ± {r[b + '_ci']:.4f} | {r['change']:+.1%} | {r['p_seeds']:.2g} |")
    share = {loss: float(np.mean(v)) for loss, v in cut.items()}
    lines.append("")
    lines.append("Share of test queries whose cut-off K splits a tie group (largest over K, expected rule): "
                 + ", ".join(f"{NAMES.get(loss, loss)} {v:.1%}" for loss, v in share.items()) + ".")
    text = "\n".join(lines) + "\n"
    (args.out / "summary.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
