"""Train SL@K with each top-K threshold estimator and compare test NDCG@K across seeds.

    BENCH_DATA_DIR=../shared/data python benchmarks/estimator_training.py [--dataset health]
        [--estimators sampled cached exact binomial_safe stratified quantile] [--every-step cached]
        [--seeds 0,1,2,3,4] [--out benchmarks/results/estimators] [--report-only]

Each variant is ``+experiment=paper/table2_mf_<dataset> loss=slk loss.estimator=<name>`` (the
paper's tuned SL@K settings, refresh every T_beta epochs); ``--every-step`` adds variants
that refresh beta at every step of every epoch (``loss.t_beta=1``). Variants that already
have a completed run per seed under ``--out`` are not rerun.

Prints, per variant: test Recall@K and NDCG@K (mean ± 95% CI over seeds), NDCG@K relative
to ``sampled`` with the paired-over-seeds and paired-over-users p-values, the estimator's
own diagnostics at the last validation (overestimate rate, median effective rank and mean
(exact - estimate) / tau_w on the loss's fixed user sample, with beta as the loss holds it,
i.e. as old as its last refresh), and the mean training time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.collect import from_directories
from bench.records import COMPLETED, RunResult, find_runs
from bench.report.runs import RunRecord, assign_labels
from bench.report.stats import compare, interval
from bench.thresholds import ESTIMATORS


def _estimator_names() -> list[str]:
    """Every registered estimator (a new one joins without editing this script), the paper's first."""
    return sorted(ESTIMATORS.names(), key=lambda name: name != "sampled")


def variant_overrides(estimator: str, every_step: bool) -> list[str]:
    return [f"loss.estimator={estimator}"] + (["loss.t_beta=1"] if every_step else [])


def variant_name(estimator: str, every_step: bool) -> str:
    return estimator + ("-every-step" if every_step else "")


def run_variant(dataset: str, estimator: str, every_step: bool, seeds: str, out: Path) -> None:
    sweep_dir = out / variant_name(estimator, every_step)
    runs, _ = find_runs([sweep_dir]) if sweep_dir.exists() else ([], [])
    done = {r.run_dir for r in runs if r.status == COMPLETED}
    if len(done) >= len(seeds.split(",")):
        return
    cmd = [sys.executable, "-m", "bench", "-m", f"+experiment=paper/table2_mf_{dataset}", "loss=slk",
           *variant_overrides(estimator, every_step), f"hydra.sweep.dir={sweep_dir}", f"seed={seeds}"]
    print("+", " ".join(cmd), flush=True)
    if subprocess.run(cmd, check=False).returncode != 0:
        print(f"{sweep_dir}: the sweep reported failed jobs; see its summary.md", flush=True)


def _last_diag(r: RunRecord, key: str) -> float:
    rows = [h for h in r.history if f"diag/{key}" in h]
    return float(rows[-1][f"diag/{key}"]) if rows else float("nan")


def _fit_minutes(r: RunRecord) -> float:
    return float(RunResult.read(r.source).timing_s.get("fit", float("nan"))) / 60


def table(records: list[RunRecord], k: int = 20) -> str:
    assign_labels(records)
    # the default estimator may come with or without its override: one row, newest run per seed
    by_seed: dict[str, dict[int, RunRecord]] = {}
    for r in sorted(records, key=lambda r: r.finished):
        by_seed.setdefault(r.variant or "loss.estimator=sampled", {})[r.seed] = r
    rows = {label: list(runs.values()) for label, runs in by_seed.items()}
    base_label = next((lab for lab in rows if lab == "loss.estimator=sampled"), None)
    recall, ndcg = f"recall@{k}", f"ndcg@{k}"
    lines = [f"| variant | seeds | Recall@{k} | NDCG@{k} | NDCG vs sampled | p (seeds) | p (users) "
             "| β overestimate rate | β median rank | β gap / τ_w | fit min |", "|" + "---|" * 11]
    for label, runs in sorted(rows.items(), key=lambda kv: (kv[0] != base_label, kv[0])):
        rc, nd = interval(runs, recall), interval(runs, ndcg)
        if base_label and label != base_label:
            c = compare(runs, rows[base_label], ndcg)
            rel, p_seed, p_user = f"{c.rel_change:+.1%}", f"{c.p_seed_t:.3f}", f"{c.p_user_t:.3f}"
        else:
            rel = p_seed = p_user = "—"
        over = np.mean([_last_diag(r, "beta_overestimate_rate") for r in runs])
        rank = np.median([_last_diag(r, "beta_effective_rank_median") for r in runs])
        gap = np.mean([_last_diag(r, "beta_gap_over_tau_w") for r in runs])
        minutes = np.mean([_fit_minutes(r) for r in runs])
        lines.append(f"| {label.replace('loss.', '')} | {len(runs)} | {rc['mean']:.4f} ± {rc['ci_half']:.4f} "
                     f"| {nd['mean']:.4f} ± {nd['ci_half']:.4f} | {rel} | {p_seed} | {p_user} | {over:.3f} "
                     f"| {rank:.0f} | {gap:+.4f} | {minutes:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="health", help="a Table 2 dataset with an MF paper experiment")
    names = _estimator_names()
    parser.add_argument("--estimators", nargs="*", default=names, choices=names)
    parser.add_argument("--every-step", nargs="*", default=["cached"], choices=names,
                        help="estimators also trained with beta refreshed at every step (t_beta=1)")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/estimators"))
    parser.add_argument("--extra", nargs="*", type=Path, default=[],
                        help="more run directories to include (e.g. an earlier sampled sweep)")
    parser.add_argument("--report-only", action="store_true", help="only summarise existing runs")
    args = parser.parse_args()

    if not args.report_only:
        for est in args.estimators:
            run_variant(args.dataset, est, False, args.seeds, args.out)
        for est in args.every_step:
            run_variant(args.dataset, est, True, args.seeds, args.out)
    records, notes = from_directories([args.out, *args.extra])
    seeds = {int(s) for s in args.seeds.split(",")}
    records = [r for r in records if r.seed in seeds and r.dataset == args.dataset and r.loss == "slk"]
    for note in notes:
        print("note:", note)
    if not records:
        print(f"no completed SL@K runs under {args.out}")
        return 1
    print(table(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
