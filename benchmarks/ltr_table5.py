"""Learning to rank on a LETOR data set: the SL@K paper's Table 5 comparison at CPU scale.

Three stages, each resumable (completed runs are kept, so a stage can be spread over sessions):

1. ``tune``: every loss tries the same number of settings (:data:`GRIDS`, six each) on fold 1,
   seed 0; the best validation NDCG@5 picks its setting. Only validation queries are looked at.
   SL@K gets twelve, the better of two protocols: the paper's (tau_d is SL's chosen tau,
   :data:`INHERITS`, so SL is tuned first; six tau_w values in [0.5, 3]) and a tau_d x tau_w grid
   (:data:`MORE_GRIDS`). On MQ2008 the paper's protocol fails: SL's validation curve is flat and
   peaks at tau 5, and with tau_d = 5 SL@5 collapses (validation NDCG@5 <= .44 against .63), so a
   comparison on that protocol alone would be unfair to SL@K. The extra trials favour SL@K, never
   the other way round.
2. ``final``: each loss with its chosen setting on every fold and seed (5 x 3 by default). Every
   finished run goes into a committed ledger (``--ledger``, default ``benchmarks/results/ltr``:
   ``<dataset>/final_<loss>_fold<k>.csv``, :mod:`bench.records.ledger`); a run the ledger holds is
   not run again, so the 15 runs of a loss can be spread over machines whose run folders are gone.
   Without the tuning run folders, the choice is read from the committed ``tuning.csv`` (the
   tuning stage's record, written by ``choose`` and by ``report``: run ``choose`` once a loss's tuning
   is done, and commit it, so the choice survives the tuning runs' machine).
3. ``report``: NDCG@5 per loss (mean over the fold x seed runs, 95% t-interval over them), the
   change against SL with a paired t-test over (fold, seed) pairs and a paired Wilcoxon test over
   test queries (each query's NDCG@5 averaged over seeds; every query is in one fold's test
   split; only where the run folders are here), Holm-corrected over the losses; written as
   ``summary.md`` / ``summary.csv`` / ``tuning.csv``.

    BENCH_DATA_DIR=../shared/data python benchmarks/ltr_table5.py tune|choose|final|report
        [--dataset mq2008] [--losses sl slk ...] [--folds 1,2,3,4,5] [--seeds 0,1,2]
        [--runs /tmp/ltr-runs] [--out benchmarks/results/ltr/mq2008] [--ledger benchmarks/results/ltr]

The runs use ``+experiment=ltr/<dataset>`` (the scorer, schedule and early stopping).
"""

from __future__ import annotations

import argparse
import itertools
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bench.records import COMPLETED, RunResult, find_runs
from bench.records.io import read_per_user
from bench.records.ledger import ledger_row, read_ledger, update_ledger
from bench.report.stats import holm, t_interval
from bench.resumable import finish_recorded

METRIC = "ndcg@5"
#: six settings per loss: the same tuning budget for each
GRIDS: dict[str, dict[str, list]] = {
    "sl": {"loss.tau": [0.1, 0.2, 0.5, 1.0, 2.0, 5.0]},
    "slk": {"loss.tau_w": [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]},
    "listnet": {"loss.tau": [0.1, 0.2, 0.5, 1.0, 2.0, 5.0]},
    "listmle": {"loss.tau": [0.1, 0.2, 0.5, 1.0, 2.0, 5.0]},
    "ranknet": {"loss.sigma": [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]},
    # no temperature: the learning rate and the weight's form instead
    "lambdalossk": {"optimizer.lr": [0.003, 0.001, 0.0003], "loss.variant": ["paper", "reference_code"]},
    "neuralndcg": {"loss.tau": [0.1, 0.2, 0.5, 1.0, 2.0, 5.0]},
    "approxndcg": {"loss.alpha": [0.5, 1.0, 2.0, 5.0, 10.0, 20.0]},
}
#: a second grid (the same keys, after the inherited ones): SL@5 without the paper's coupling of tau_d to SL
MORE_GRIDS: dict[str, dict[str, list]] = {"slk": {"loss.tau_d": [0.2, 0.5, 1.0], "loss.tau_w": [0.5, 2.5]}}
#: a value taken from another loss's chosen setting: loss -> (that loss, its key, this loss's key)
INHERITS = {"slk": ("sl", "loss.tau", "loss.tau_d")}
#: fixed per loss (the K of a top-K loss is the metric's)
FIXED = {"slk": ["loss.k=5"], "lambdalossk": ["loss.k=5"]}
NAMES = {"sl": "SL", "slk": "SL@5", "listnet": "ListNet", "listmle": "ListMLE", "ranknet": "RankNet",
         "lambdalossk": "LambdaLoss@5", "neuralndcg": "NeuralNDCG", "approxndcg": "ApproxNDCG"}
#: the paper's Table 5, NDCG@5 on MSLR-WEB10K / WEB30K / Istella (orientation only: other data)
PAPER = {"listmle": ".4145 / .4433 / .5671", "listnet": ".4225 / .4594 / .6290", "ranknet": ".4253 / .4426 / .6189",
         "lambdalossk": ".4320 / .4496 / .5860", "neuralndcg": ".4338 / .4524 / .5823",
         "sl": ".4310 / .4552 / .6327", "slk": ".4633 / .4895 / .6412"}


def bench(args: list[str], sweep_dir: Path) -> None:
    cmd = [sys.executable, "-m", "bench", "-m", *args, "logger=csv", f"hydra.sweep.dir={sweep_dir}"]
    print("+", " ".join(cmd), flush=True)
    if subprocess.run(cmd, check=False).returncode != 0:
        print(f"some jobs failed; see {sweep_dir}", flush=True)


def completed(folder: Path) -> list[RunResult]:
    if not folder.exists():
        return []
    runs, _ = find_runs([folder])
    return [r for r in runs if r.status == COMPLETED]


def inherited(loss: str, runs: Path, record: Path | None = None) -> list[str]:
    """The values ``loss`` takes from another loss's chosen setting (SL@K's tau_d = SL's tau)."""
    if loss not in INHERITS:
        return []
    source, key, target = INHERITS[loss]
    grid = grid_settings(source, runs, record)
    table = tuning_table(source, runs, record, grid)
    if len(table) < len(grid):
        raise SystemExit(f"{loss} takes {target} from {source}'s tuned {key}: finish {source}'s tuning first "
                         f"(tune --losses {source} {loss})")
    value = dict(o.split("=", 1) for o in chosen(source, runs, record)[0])[key]
    return [f"{target}={value}"]


def _product(grid: dict[str, list]) -> list[list[str]]:
    keys = list(grid)
    if not keys:
        return []
    return [[f"{k}={v}" for k, v in zip(keys, values, strict=True)]
            for values in itertools.product(*(grid[k] for k in keys))]


def grid_settings(loss: str, runs: Path, record: Path | None = None) -> list[list[str]]:
    fixed = inherited(loss, runs, record)
    return [[*fixed, *s] for s in _product(GRIDS[loss])] + _product(MORE_GRIDS.get(loss, {}))


def setting_of(run: RunResult, loss: str) -> tuple[str, ...]:
    keys = set(GRIDS[loss]) | set(MORE_GRIDS.get(loss, {})) | ({INHERITS[loss][2]} if loss in INHERITS else set())
    return tuple(sorted(o for o in run.overrides if o.split("=", 1)[0] in keys))


def tune(dataset: str, losses: list[str], runs: Path) -> None:
    for loss in losses:
        folder = runs / "tune" / loss
        try:
            grid = grid_settings(loss, runs)
        except SystemExit as why:  # SL@K before SL's tuning is complete: the other losses still run
            print(why, flush=True)
            continue
        done = {setting_of(r, loss) for r in completed(folder)}
        todo = [s for s in grid if tuple(sorted(s)) not in done]
        base = [f"+experiment=ltr/{dataset}", f"loss={loss}", *FIXED.get(loss, []), "dataset.fold=1", "seed=0"]
        parts = len(list(folder.glob("part*"))) if folder.exists() else 0
        if len(todo) == len(grid) and parts == 0 and loss not in MORE_GRIDS:  # one process sweeps the grid
            bench([*base, *inherited(loss, runs), *(f"{k}={','.join(map(str, v))}" for k, v in GRIDS[loss].items())],
                  folder / "part0")
            continue
        for i, setting in enumerate(todo):
            bench([*base, *setting], folder / f"part{parts + i + 1}")


def tuning_table(loss: str, runs: Path, record: Path | None, grid: list[list[str]]) -> pd.DataFrame:
    """The loss's finished tuning runs of ``grid`` (setting, validation NDCG@5, best epoch): from the run
    folders under ``runs``, or, when there are none, from ``record`` (a committed ``tuning.csv``). Only
    runs of the current grid count (a grid changed after some runs must not give a loss more trials)."""
    keys = {tuple(sorted(s)) for s in grid}
    rows = [{"loss": loss, "setting": " ".join(setting_of(r, loss)), "val_" + METRIC: r.best_val,
             "epoch": r.best.get("epoch")} for r in completed(runs / "tune" / loss) if setting_of(r, loss) in keys]
    if not rows and record is not None and record.is_file():
        held = pd.read_csv(record)
        held = held[(held["loss"] == loss) & held["setting"].map(lambda x: tuple(sorted(str(x).split())) in keys)]
        rows = held.to_dict("records")
    return pd.DataFrame(rows, columns=["loss", "setting", "val_" + METRIC, "epoch"])


def chosen(loss: str, runs: Path, record: Path | None = None) -> tuple[list[str], pd.DataFrame]:
    """The loss's best tuning setting (by validation NDCG@5) and its tuning table
    (:func:`tuning_table`)."""
    table = tuning_table(loss, runs, record, grid_settings(loss, runs, record))
    if table.empty:
        raise SystemExit(f"{loss}: no finished tuning run of its grid under {runs / 'tune' / loss}"
                         f"{'' if record is None else f' nor in {record}'}; run the tune stage")
    best = table.loc[table["val_" + METRIC].idxmax(), "setting"]
    return str(best).split(), table


def final_ledger(ledger: Path, dataset: str, loss: str, fold: int) -> Path:
    """One ledger per loss and fold (a ledger holds runs on one data version; each fold is its own)."""
    return ledger / dataset / f"final_{loss}_fold{fold}.csv"


def final(dataset: str, losses: list[str], folds: list[int], seeds: list[int], runs: Path, ledger: Path,
          record: Path | None = None) -> None:
    for loss in losses:
        setting, _ = chosen(loss, runs, record)
        for fold in folds:
            for seed in seeds:
                overrides = [f"+experiment=ltr/{dataset}", f"loss={loss}", *FIXED.get(loss, []), *setting,
                             f"dataset.fold={fold}", f"seed={seed}", "logger=csv"]
                done = finish_recorded(runs / "final" / loss / f"fold{fold}-seed{seed}", overrides,
                                       final_ledger(ledger, dataset, loss, fold), one_setting=False)
                print(f"{loss} fold {fold} seed {seed}: {done}", flush=True)


def final_values(loss: str, runs: Path, ledger: Path | None, dataset: str) -> tuple[dict, list[RunResult]]:
    """``{(fold, seed): test NDCG@5}`` of the loss's final runs, from its ledgers and the run folders here
    (which are recorded into the ledgers first), and those run folders (for per-query tests)."""
    done = completed(runs / "final" / loss)
    values: dict[tuple[int, int], float] = {}
    if ledger is not None:
        for res in done:
            update_ledger(final_ledger(ledger, dataset, loss, int(res.config["dataset"]["fold"])), [ledger_row(res)],
                          one_setting=False)
        for path in sorted((ledger / dataset).glob(f"final_{loss}_fold*.csv")):
            fold = int(path.stem.rsplit("fold", 1)[1])
            values.update({(fold, int(row["seed"])): float(row["test/" + METRIC])  # type: ignore[call-overload,arg-type]
                           for row in read_ledger(path)})
    values.update({(int(r.config["dataset"]["fold"]), int(r.seed)): float(r.test[METRIC]) for r in done})
    return values, done


def per_query(run: RunResult) -> pd.Series:
    """The run's test NDCG@5 per query, indexed by (fold, query)."""
    assert run.run_dir is not None
    queries, metrics = read_per_user(run.run_dir / "per_user_test.npz")
    fold = run.config["dataset"]["fold"]
    return pd.Series(metrics[METRIC], index=pd.MultiIndex.from_arrays([[fold] * len(queries), queries]))


def choose(losses: list[str], runs: Path, out: Path) -> dict[str, tuple[list[str], pd.DataFrame]]:
    """Each loss's choice and tuning table (:func:`chosen`), written to ``out/tuning.csv`` (the record a
    later session chooses from when the tuning run folders are gone); the record's rows of other losses
    are kept, so the losses can be tuned and recorded a few at a time."""
    record = out / "tuning.csv"
    choices = {loss: chosen(loss, runs, record) for loss in losses}  # each tuning folder read once
    tables = [table for _, table in choices.values()]
    if record.is_file():
        held = pd.read_csv(record)
        tables.insert(0, held[~held["loss"].isin(losses)])
    out.mkdir(parents=True, exist_ok=True)
    pd.concat(tables, ignore_index=True).to_csv(record, index=False)
    return choices


def report(losses: list[str], runs: Path, out: Path, baseline: str = "sl", ledger: Path | None = None,
           dataset: str = "mq2008") -> str:
    choices = choose(losses, runs, out)
    values: dict[str, dict[tuple[int, int], float]] = {}
    queries: dict[str, pd.Series] = {}
    for loss in losses:
        values[loss], done = final_values(loss, runs, ledger, dataset)
        by_seed = [per_query(r) for r in done]
        queries[loss] = pd.concat(by_seed, axis=1).mean(axis=1) if by_seed else pd.Series(dtype=float)
    rows, pvalues = [], []
    base = values.get(baseline, {})
    for loss in losses:
        ci = t_interval(values[loss].values())
        pairs = sorted(set(values[loss]) & set(base))
        p_runs = p_queries = math.nan
        change = math.nan
        if loss != baseline and len(pairs) >= 2:
            x = np.array([values[loss][p] for p in pairs])
            y = np.array([base[p] for p in pairs])
            change = float(x.mean() / y.mean() - 1)
            p_runs = float(stats.ttest_rel(x, y).pvalue)
            common = queries[loss].index.intersection(queries[baseline].index)
            diff = queries[loss][common] - queries[baseline][common]
            if len(common) == 0:  # run folders not here (runs from the ledger only): no per-query test
                p_queries = math.nan
            else:
                p_queries = float(stats.wilcoxon(diff[diff != 0]).pvalue) if (diff != 0).sum() > 0 else 1.0
        pvalues.append(p_queries)
        rows.append({"loss": NAMES.get(loss, loss), "runs": ci["n"], METRIC: ci["mean"], "ci_half": ci["ci_half"],
                     "vs_" + baseline: change, "p_runs": p_runs, "p_queries": p_queries,
                     "setting": " ".join(choices[loss][0]), "paper": PAPER.get(loss, "")})
    for row, adjusted in zip(rows, holm(pvalues), strict=True):
        row["p_queries_holm"] = adjusted
    table = pd.DataFrame(rows)
    table.to_csv(out / "summary.csv", index=False)  # out exists: choose wrote tuning.csv there
    lines = [f"| loss | {METRIC} (95% CI) | runs | vs {NAMES[baseline]} | p (fold x seed pairs) | "
             f"p (queries, Holm) | setting (fold 1 validation) | paper, WEB10K / WEB30K / Istella |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        change = "" if math.isnan(r["vs_" + baseline]) else f"{r['vs_' + baseline]:+.1%}"
        p1 = "" if math.isnan(r["p_runs"]) else f"{r['p_runs']:.2g}"
        p2 = "" if math.isnan(r["p_queries_holm"]) else f"{r['p_queries_holm']:.2g}"
        lines.append(f"| {r['loss']} | {r[METRIC]:.4f} ± {r['ci_half']:.4f} | {r['runs']} | {change} | {p1} | {p2} | "
                     f"{r['setting']} | {r['paper']} |")
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["tune", "choose", "final", "report"])
    parser.add_argument("--dataset", default="mq2008")
    parser.add_argument("--losses", nargs="*", default=list(GRIDS), choices=list(GRIDS))
    parser.add_argument("--folds", default="1,2,3,4,5")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--runs", type=Path, default=Path("ltr-runs"))
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/results/ltr/<dataset>")
    parser.add_argument("--ledger", type=Path, default=Path("benchmarks/results/ltr"),
                        help="where the committed ledgers of final runs go (<dataset>/final_<loss>_fold<k>.csv)")
    args = parser.parse_args()
    runs = args.runs / args.dataset
    out = args.out or Path("benchmarks/results/ltr") / args.dataset
    if args.stage == "tune":
        tune(args.dataset, args.losses, runs)
    elif args.stage == "choose":
        for loss, (setting, _) in choose(args.losses, runs, out).items():
            print(f"{loss}: {' '.join(setting)}")
    elif args.stage == "final":
        final(args.dataset, args.losses, [int(f) for f in args.folds.split(",")],
              [int(s) for s in args.seeds.split(",")], runs, args.ledger, out / "tuning.csv")
    else:
        print(report(args.losses, runs, out, ledger=args.ledger, dataset=args.dataset), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
