"""The SL@K paper's Table 6: SASRec with BCE, SL and SL@20 on Amazon Games and Beauty, full ranking.

Three stages, each resumable run by run (a stage is rerun until it is done, across sessions). Every
finished run goes into a committed ledger (``--ledger``, default beside the summary:
``<dataset>/tune_<loss>.csv`` and ``final_<loss>.csv``, :mod:`bench.records.ledger`), which is what
the stages read: a run the ledger holds is not run again, and the choice of a tuned value and the
report need no run folder, so the study can go on from machine to machine. A final run also leaves its per-user
NDCG@20 and Hit@20 beside its row (``final_<loss>.per_user/seed<k>.npz``, kilobytes), so the per-user
tests pair seeds that ran on different machines.

1. ``tune``: SL's tau, then SL@20's tau_w with tau_d = SL's chosen tau (the paper's protocol), each
   over the six values of its Table 6 sweeper (``conf/hydra/sweeper/seq_search_sl|slk.yaml``, read
   from there), one run per value on the tuning seed, which none of the reported runs uses (so the
   chosen run's luck does not enter the test numbers). Validation NDCG@20 picks the value; test
   metrics are never read. BCE has nothing to tune. This is what the sweepers do with Optuna's grid
   sampler, as separate runs that resume where they stopped: a six-run sweep of a Games model takes
   longer than one sitting on CPU cores.
2. ``final``: BCE, SL and SL@20 with the chosen values, seeds 0, 1, 2 by default.
3. ``report``: per data set, Hit@20 and NDCG@20 (mean ± 95% t-interval over seeds), each loss
   against SL (relative change, paired t-test over seeds, Wilcoxon over users of seed-averaged
   NDCG@20, Holm over the comparisons), the biased sampled protocol (the test item among 100
   sampled items: Hit@10 / NDCG@10, as SASRec's paper reported) and the paper's numbers. A tuned value
   at either end of its grid is flagged ("grid edge"): the best may lie outside it.

    BENCH_DATA_DIR=../shared/data python benchmarks/seq_table6.py tune|final|report
        [--datasets games beauty] [--seeds 0,1,2] [--runs /tmp/table6] [--out benchmarks/results/seq/table6]
        [--ledger benchmarks/results/seq/table6]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import yaml

from bench.app import CONFIG_DIR, compose
from bench.records import RunResult
from bench.records.ledger import find_row, keep_per_user, kept_per_user, read_ledger
from bench.report.runs import RunRecord, from_ledger
from bench.report.stats import compare, holm, interval
from bench.resumable import finish_recorded

LOSSES = ("bce", "sl", "slk")
NAMES = {"bce": "BCE", "sl": "SL", "slk": "SL@20"}
#: the loss whose tuned value another takes: SL@20's tau_d is SL's tau
INHERITS = {"slk": ("sl", "loss.tau", "loss.tau_d")}
TUNE_SEED = 100
#: a seed's finals longest first (SL@20 takes twice SL's time, four times BCE's), so that the runs
#: that start last, when the other jobs may have nothing left to run, are short ones
FINAL_ORDER = ("slk", "sl", "bce")
METRIC = "ndcg@20"
#: the per-user test metrics a final run leaves beside its ledger row, for the per-user tests on
#: another machine (kilobytes a run)
PER_USER_KEPT = ("ndcg@20", "hit@20")


def grid(loss: str) -> tuple[str, list[str]]:
    """(key, values) of the loss's Table 6 sweeper: the one place the six values are written."""
    path = Path(CONFIG_DIR) / "hydra" / "sweeper" / f"seq_search_{loss}.yaml"
    ((key, spec),) = yaml.safe_load(path.read_text())["params"].items()
    if not (spec.startswith("choice(") and spec.endswith(")")):
        raise SystemExit(f"{path}: expected one `key: choice(...)` parameter, got {key}: {spec}")
    return key, [v.strip() for v in spec[len("choice("):-1].split(",")]


def at_grid_edge(loss: str, setting: list[str]) -> bool:
    """Whether the chosen value of the loss's tuned key is the first or last of its grid."""
    key, values = grid(loss)
    chosen_value = dict(s.split("=", 1) for s in setting).get(key)
    return chosen_value in (values[0], values[-1])


def experiment(dataset: str, loss: str) -> list[str]:
    return [f"+experiment=seq/table6_{dataset}", f"loss={loss}"]


def tuned_folder(runs: Path, dataset: str, loss: str, setting: list[str]) -> Path:
    return runs / dataset / "tune" / loss / "_".join(s.replace("loss.", "") for s in setting)


def tune_ledger(ledger: Path, dataset: str, loss: str) -> Path:
    return ledger / dataset / f"tune_{loss}.csv"


def final_ledger(ledger: Path, dataset: str, loss: str) -> Path:
    return ledger / dataset / f"final_{loss}.csv"


def tune_overrides(dataset: str, loss: str, setting: list[str]) -> list[str]:
    return [*experiment(dataset, loss), *setting, f"seed={TUNE_SEED}", "logger=csv"]


def settings(ledger: Path, dataset: str, loss: str) -> list[list[str]]:
    """The loss's trials: its grid, plus what it inherits (raises SystemExit until that is tuned)."""
    if loss == "bce":
        return []
    key, values = grid(loss)
    fixed = []
    if loss in INHERITS:
        source, source_key, target = INHERITS[loss]
        value = dict(s.split("=", 1) for s in chosen(ledger, dataset, source)[0])[source_key]
        fixed = [f"{target}={value}"]
    return [[*fixed, f"{key}={v}"] for v in values]


def chosen(ledger: Path, dataset: str, loss: str) -> tuple[list[str], pd.DataFrame]:
    """The loss's setting with the best validation NDCG@20 over its whole grid (read from the tuning
    ledger), and the grid's table."""
    if loss == "bce":
        return [], pd.DataFrame()
    held = read_ledger(tune_ledger(ledger, dataset, loss))
    rows, missing = [], []
    for setting in settings(ledger, dataset, loss):
        row = find_row(held, tune_overrides(dataset, loss, setting))
        if row is None:
            missing.append(" ".join(setting))
            continue
        rows.append({"dataset": dataset, "loss": loss, "setting": " ".join(setting),
                     "val_" + METRIC: row["val/" + METRIC], "best_epoch": row.get("best_epoch")})
    if missing:
        raise SystemExit(f"{dataset} {loss}: tuning not finished ({len(missing)} of 6 left: {'; '.join(missing)}); "
                         "run the tune stage")
    table = pd.DataFrame(rows)
    return str(table.loc[table["val_" + METRIC].idxmax(), "setting"]).split(), table


class Job(NamedTuple):
    """One run of the study: where it runs, what makes it, and the ledger that records it."""

    folder: Path
    overrides: tuple[str, ...]
    ledger: Path
    one_setting: bool


def runnable(runs: Path, ledger: Path, datasets: list[str], seeds: list[int], stages: Sequence[str],
             blocked: list[str] | None = None) -> list[Job]:
    """The runs of ``stages`` (``tune``, ``final``) that the ledgers do not hold and whose inputs
    are settled (SL@20's tuning once SL's tau is chosen, a loss's finals once its value is), in the
    order of ``datasets``, each one's tuning before its finals. ``blocked`` collects why the others
    must wait."""
    blocked = blocked if blocked is not None else []
    jobs: list[Job] = []
    for dataset in datasets:  # dataset-major: the first data set's study is whole before the next one's starts
        for loss in ("sl", "slk") if "tune" in stages else ():  # SL first: SL@20 takes its tau_d
            try:
                trials = settings(ledger, dataset, loss)
            except SystemExit as why:
                blocked.append(str(why))
                continue
            for setting in trials:
                jobs.append(Job(tuned_folder(runs, dataset, loss, setting),
                                tuple(tune_overrides(dataset, loss, setting)), tune_ledger(ledger, dataset, loss),
                                one_setting=False))
        for seed in seeds if "final" in stages else []:  # seed-major: every loss gets a first seed before any a second
            for loss in FINAL_ORDER:
                try:
                    setting = chosen(ledger, dataset, loss)[0]
                except SystemExit as why:
                    if "tune" not in stages:  # with tuning in the call, its own message says why
                        blocked.append(str(why))
                    continue
                jobs.append(Job(final_folder(runs, dataset, loss, seed),
                                (*experiment(dataset, loss), *setting, f"seed={seed}", "logger=csv"),
                                final_ledger(ledger, dataset, loss), one_setting=True))
    held = {path: read_ledger(path) for path in {j.ledger for j in jobs}}  # each ledger read once
    return [j for j in jobs if find_row(held[j.ledger], j.overrides) is None]


def run_stages(runs: Path, ledger: Path, datasets: list[str], seeds: list[int], stages: Sequence[str],
               jobs: int = 1) -> None:
    """Run what :func:`runnable` offers, ``jobs`` runs at a time, each into its ledger, until nothing
    is left that can start: a run that ends settles the next ones (SL's last tuning run lets SL@20's
    start, a tuned loss's finals follow). Each run is tried once per call; with ``jobs`` > 1 a run's
    output goes to ``<folder>.log`` beside its folder. Runs side by side share a GPU by time slices:
    16 Table 6 runs on one H200 kept it 99% busy at about 18 s a training epoch each (an aggregate
    of ~155 steps a second), so more jobs than that buy nothing there; on CPU cores give each job one
    thread (``OMP_NUM_THREADS=1``)."""
    tried: set[Path] = set()
    running: dict[Future, Job] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        while True:
            blocked: list[str] = []
            for job in runnable(runs, ledger, datasets, seeds, stages, blocked):
                if len(running) >= jobs:
                    break
                if job.folder in tried:
                    continue
                tried.add(job.folder)
                log = job.folder.with_name(job.folder.name + ".log") if jobs > 1 else None
                running[pool.submit(finish_recorded, job.folder, list(job.overrides), job.ledger, job.one_setting,
                                    log=log, per_user=PER_USER_KEPT if job.one_setting else ())] = job
            if not running:
                for why in dict.fromkeys(blocked):
                    print(why, flush=True)
                return
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                print(f"{job.folder}: {future.result()}", flush=True)


def final_folder(runs: Path, dataset: str, loss: str, seed: int) -> Path:
    return runs / dataset / "final" / loss / f"seed{seed}"


def final_records(runs: Path, ledger: Path, dataset: str, loss: str) -> list[RunRecord]:
    """The loss's final runs on ``dataset`` as the ledger holds them, their per-user values from
    the run folders where those are still here, else as the ledger kept them."""
    path = final_ledger(ledger, dataset, loss)
    rows = read_ledger(path)
    local = {}
    for row in rows:
        folder = final_folder(runs, dataset, loss, int(row["seed"]))  # type: ignore[call-overload]
        if (folder / "results.json").exists():
            res = local[int(row["seed"])] = RunResult.read(folder)  # type: ignore[call-overload]
            if res.finished_at == row["finished_at"] and kept_per_user(path, row) is None:
                keep_per_user(path, res, PER_USER_KEPT)  # a run recorded by code that did not keep them yet
    paper = dict(compose([*experiment(dataset, loss), "output_dir=unused"]).get("paper") or {}) if rows else {}
    return from_ledger(rows, "seq", dataset, "sasrec", loss, local, paper, k=20 if loss == "slk" else None,
                       ledger=path)


def report(runs: Path, ledger: Path, datasets: list[str], out: Path) -> str:
    rows: list[dict] = []
    tables: list[pd.DataFrame] = []
    for dataset in datasets:
        by_loss = {loss: final_records(runs, ledger, dataset, loss) for loss in LOSSES}
        base = by_loss.get("sl", [])
        choices = {}  # each loss's tuning ledger read once, for its row and for tuning.csv
        for loss in LOSSES:
            try:
                choices[loss] = chosen(ledger, dataset, loss)
            except SystemExit:
                pass
        tables += [choices[loss][1] for loss in ("sl", "slk") if loss in choices]
        for loss in LOSSES:
            runs_of = by_loss.get(loss, [])
            if not runs_of:
                continue
            setting = (" ".join(choices[loss][0]) or "-") if loss in choices else "?"
            if loss in choices and loss != "bce" and at_grid_edge(loss, choices[loss][0]):
                setting += " (grid edge)"  # the best may lie beyond the grid: say so beside the number
            row: dict = {"dataset": dataset, "loss": NAMES[loss], "seeds": len(runs_of), "setting": setting}
            for m in ("hit@20", "ndcg@20"):
                ci = interval(runs_of, m)
                row[m], row[m + "_ci"] = ci["mean"], ci["ci_half"]
                row["paper_" + m] = runs_of[0].paper.get(m, math.nan)
            for m in ("hit@10", "ndcg@10"):
                values = [r.sampled[m] for r in runs_of if m in r.sampled]
                row["sampled_" + m] = sum(values) / len(values) if values else math.nan
            row["vs_sl"] = row["p_seeds"] = row["p_users"] = math.nan
            if loss != "sl" and base:
                c = compare(runs_of, base, METRIC)
                row["vs_sl"], row["p_seeds"], row["p_users"] = c.rel_change, c.p_seed_t, c.p_user_wilcoxon
            rows.append(row)
    for r, p in zip(rows, holm([r["p_users"] for r in rows]), strict=True):  # NaNs stay out of the family
        r["p_users_holm"] = p
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "summary.csv", index=False)
    if tables:
        pd.concat(tables, ignore_index=True).to_csv(out / "tuning.csv", index=False)

    def num(x: float, fmt: str) -> str:
        return "" if math.isnan(x) else format(x, fmt)

    lines = ["| data | loss | seeds | Hit@20 | NDCG@20 | NDCG@20 vs SL | p (seeds) | p (users, Holm) | "
             "paper Hit@20 / NDCG@20 | sampled-100 Hit@10 / NDCG@10 (biased) | setting |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['loss']} | {r['seeds']} | {r['hit@20']:.4f} ± {r['hit@20_ci']:.4f} | "
            f"{r['ndcg@20']:.4f} ± {r['ndcg@20_ci']:.4f} | {num(r['vs_sl'], '+.1%')} | {num(r['p_seeds'], '.2g')} | "
            f"{num(r['p_users_holm'], '.2g')} | {num(r['paper_hit@20'], '.4f')} / {num(r['paper_ndcg@20'], '.4f')} | "
            f"{num(r['sampled_hit@10'], '.4f')} / {num(r['sampled_ndcg@10'], '.4f')} | {r['setting']} |")
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["tune", "final", "all", "report"],
                        help="all: tune and final together, each final starting once its loss is tuned")
    parser.add_argument("--datasets", nargs="*", default=["games", "beauty"], choices=["games", "beauty"])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--runs", type=Path, default=Path("table6-runs"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/seq/table6"))
    parser.add_argument("--ledger", type=Path, default=Path("benchmarks/results/seq/table6"),
                        help="where the committed run ledgers go (<dataset>/tune_<loss>.csv, final_<loss>.csv)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at a time (a GPU, or one CPU thread each: OMP_NUM_THREADS=1)")
    args = parser.parse_args()
    if args.stage != "report":
        stages = ("tune", "final") if args.stage == "all" else (args.stage,)
        run_stages(args.runs, args.ledger, args.datasets, [int(s) for s in args.seeds.split(",")], stages, args.jobs)
    else:
        print(report(args.runs, args.ledger, args.datasets, args.out), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
