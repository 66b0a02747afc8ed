"""Per-pair against shared negatives (``train.negatives``): the same paper experiment, both modes,
several seeds; is the difference in test metrics beyond seed noise, and what does each cost?

    BENCH_DATA_DIR=../shared/data python benchmarks/negatives_study.py --dataset health --losses sl slk
        [--seeds 0,1,2,3,4] [--per-pair-seeds 0,1] [--groups 1024] [--order shared per_pair groups]
        [--out benchmarks/results/negatives] [--report-only]

Each (loss, mode) is ``+experiment=paper/table2_mf_<dataset> loss=<loss> train.negatives=<mode>``
(the paper's tuned settings, 200 epochs, validation every 5); ``--groups G`` adds the arm
``shared/G``: shared mode with one draw per group of ceil(B / G) rows (``train.shared_groups=G``;
G = B: a draw per row, which separates sharing a draw across rows from masking positives
instead of rejecting them). Each arm runs in its own sweep folder under
``--out/<dataset>``; seeds that already have a completed run are not rerun (each call sweeps the
missing ones into a sub-folder), so a study can be spread over several sessions. Prints, per
loss: Recall@20 and NDCG@20 (mean ± 95% CI over seeds) in each mode, the shared - per-pair NDCG@20
difference with the 95% CI of its mean over the seeds both modes ran (paired by seed: same split,
same initialisation), the relative difference, the paired-over-seeds and paired-over-users
p-values, and the mean training time per run.
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
from bench.report.stats import compare, interval, t_interval
from bench.step import negatives_overrides

MODES = ("per_pair", "shared")


def sweep_dir(out: Path, dataset: str, loss: str, mode: str) -> Path:
    return out / dataset / f"{loss}-{mode.replace('/', '-g')}"


def run_sweep(dataset: str, loss: str, mode: str, seeds: str, out: Path) -> None:
    """Run the seeds the (loss, mode) folder lacks, in a sub-folder of their own (resumable)."""
    folder = sweep_dir(out, dataset, loss, mode)
    runs, _ = find_runs([folder]) if folder.exists() else ([], [])
    todo = sorted({int(s) for s in seeds.split(",")} - {r.seed for r in runs if r.status == COMPLETED})
    if not todo:
        return
    part = folder / ("seeds-" + "-".join(map(str, todo)))
    cmd = [sys.executable, "-m", "bench", "-m", f"+experiment=paper/table2_mf_{dataset}", f"loss={loss}",
           *negatives_overrides(mode), "logger=csv", f"hydra.sweep.dir={part}", f"seed={','.join(map(str, todo))}"]
    print("+", " ".join(cmd), flush=True)
    if subprocess.run(cmd, check=False).returncode != 0:
        print(f"{part}: the sweep reported failed jobs; see its summary.md", flush=True)


def _mode(r: RunRecord) -> str:
    def value(key: str, default: str) -> str:
        return next((o.split("=", 1)[1] for o in r.overrides if o.startswith(f"{key}=")), default)
    groups = value("train.shared_groups", "1")
    return value("train.negatives", "per_pair") + (f"/{groups}" if groups != "1" else "")


def _fit_minutes(runs: list[RunRecord]) -> float:
    return float(np.mean([RunResult.read(r.source).timing_s.get("fit", np.nan) for r in runs])) / 60


def table(records: list[RunRecord], k: int = 20) -> str:
    assign_labels(records)
    recall, ndcg = f"recall@{k}", f"ndcg@{k}"
    by: dict[tuple[str, str], dict[int, RunRecord]] = {}
    for r in sorted(records, key=lambda r: r.finished):  # the newest run per seed
        by.setdefault((r.loss, _mode(r)), {})[r.seed] = r
    lines = [f"| loss | mode | seeds | Recall@{k} | NDCG@{k} | NDCG shared − per-pair [95% CI] | relative "
             f"| p (seeds) | p (users) | fit min / run |", "|" + "---|" * 10]
    for loss in sorted({loss for loss, _ in by}):
        base = list(by.get((loss, "per_pair"), {}).values())
        grouped = {m for lo, m in by if lo == loss and m not in MODES}  # shared/G arms, by G
        arms = [*MODES, *sorted(grouped, key=lambda m: int(m.partition("/")[2]))]
        for mode in arms:
            runs = list(by.get((loss, mode), {}).values())
            if not runs:
                continue
            rc, nd = interval(runs, recall), interval(runs, ndcg)
            diff = rel = p_seed = p_user = "—"
            if mode != "per_pair" and base:
                c = compare(runs, base, ndcg)
                a, b = {r.seed: r.test[ndcg] for r in runs}, {r.seed: r.test[ndcg] for r in base}
                d = t_interval([a[s] - b[s] for s in sorted(set(a) & set(b))])
                if d["n"] > 1:
                    diff = f"{d['mean']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}] ({d['n']} seeds)"
                elif d["n"] == 1:
                    diff = f"{d['mean']:+.4f} (1 seed)"
                rel, p_seed, p_user = f"{c.rel_change:+.1%}", f"{c.p_seed_t:.3f}", f"{c.p_user_t:.3f}"
            lines.append(f"| {loss} | {mode} | {len(runs)} | {rc['mean']:.4f} ± {rc['ci_half']:.4f} | "
                         f"{nd['mean']:.4f} ± {nd['ci_half']:.4f} | {diff} | {rel} | {p_seed} | {p_user} | "
                         f"{_fit_minutes(runs):.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="health", help="a Table 2 dataset with an MF paper experiment")
    parser.add_argument("--losses", nargs="+", default=["sl", "slk"])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--per-pair-seeds", help="seeds of the per-pair runs when fewer (slow data sets)")
    parser.add_argument("--groups", nargs="*", type=int, default=[],
                        help="also run shared mode with a draw per this many groups of rows (train.shared_groups)")
    parser.add_argument("--order", nargs="+", default=["shared", "per_pair", "groups"],
                        choices=["shared", "per_pair", "groups"], help="the arms to run, in this order")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/negatives"))
    parser.add_argument("--extra", nargs="*", type=Path, default=[], help="more run or sweep folders to include")
    parser.add_argument("--report-only", action="store_true", help="only tabulate existing runs")
    args = parser.parse_args()
    if not args.report_only:
        for loss in args.losses:
            for arm in args.order:
                if arm == "groups":
                    for groups in args.groups:
                        run_sweep(args.dataset, loss, f"shared/{groups}", args.seeds, args.out)
                else:
                    run_sweep(args.dataset, loss, arm, args.per_pair_seeds or args.seeds if arm == "per_pair"
                              else args.seeds, args.out)
    folders = [p for p in [args.out / args.dataset, *args.extra] if p.exists()]
    records, notes = from_directories(folders) if folders else ([], [])
    records = [r for r in records if r.dataset == args.dataset and r.loss in args.losses]
    for note in notes:
        print("note:", note)
    if not records:
        print(f"no completed runs for {args.dataset} under {args.out}")
        return 1
    print(table(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
