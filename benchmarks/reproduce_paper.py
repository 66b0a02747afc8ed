"""Reproduce SL@K-paper cells (Table 2) with 5 seeds and compare with the paper.

Runs ``python -m bench ... -m seed=0,1,2,3,4`` per cell (the paper's settings), reads the
seed summary and prints ours (mean ± 95% CI) next to the paper, with the relative gap.

    BENCH_DATA_DIR=../shared/data python benchmarks/reproduce_paper.py [--cells health-mf-sl ...]
        [--seeds 0,1,2,3,4] [--epochs 200] [--negatives per_pair|shared|shared/G] [--out benchmarks/results/reproduce]

Seeds a cell already has are not rerun (each call sweeps the missing ones into its own folder
under the cell's), so a long reproduction can be spread over several sessions.

A cell passes when the mean is within ``--tolerance`` (3% relative) of the paper.

The last column re-evaluates each run's best checkpoint under the SL@K reference code's
test protocol, which masks only training items (validation items can then take top-K
slots): it isolates how much of a gap is the protocol rather than the training.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from bench.app import CONFIG_DIR, compose
from bench.errors import ConfigError
from bench.report.checkpoints import retest
from bench.report.summary import summarize
from bench.results import COMPLETED, find_runs
from bench.step import negatives_overrides


def _experiment_cells() -> dict[str, tuple[list[str], dict[str, float]]]:
    """<dataset>-<backbone>-<loss> for every loss of every paper experiment (Tables 2-4 and 17-18);
    a loss's variants add a suffix (:func:`_variant_suffix`)."""
    cells = {}
    for path in sorted((Path(CONFIG_DIR) / "experiment" / "paper").glob("table*.yaml")):
        _, backbone, dataset = path.stem.split("_")
        for loss, entry in yaml.safe_load(path.read_text())["per_loss"].items():
            name, base = f"{dataset}-{backbone}-{loss}", [f"+experiment=paper/{path.stem}", f"loss={loss}"]
            cells[name] = (base, {})
            for variant in entry.get("variants") or []:
                cells[name + _variant_suffix(variant["when"])] = ([*base, *(f"{k}={v}" for k, v in
                                                                         variant["when"].items())], {})
    return cells


def _variant_suffix(when: dict) -> str:
    """-s for sampled ranks (LambdaLoss-S), -k5 for SL@K trained at K = 5."""
    if when == {"loss.ranks": "sampled"}:
        return "-s"
    if list(when) == ["loss.k"]:
        return f"-k{when['loss.k']}"
    raise ValueError(f"a paper experiment has a variant this script cannot name: {when}")


# cell -> (overrides, {metric: paper value}). Table 2 and Table 17-18 cells come from the paper
# experiments (conf/experiment/paper/table*_<backbone>_<dataset>.yaml: tuned settings and paper
# values), named <dataset>-<backbone>-<loss>[-s|-k<K>]; the others are spelled out here.
CELLS: dict[str, tuple[list[str], dict[str, float]]] = {
    **_experiment_cells(),
    # Other tasks: the paper's Beauty (SASRec) and Cora (HeaRT protocol) values, for
    # orientation only: other data or another evaluation protocol.
    "cora-gnn-sl": (
        ["task=linkpred", "dataset=cora", "model=gnn", "loss=sl", "loss.tau=0.2"],
        {"hit@20": 0.4668, "mrr@100": 0.1772},
    ),
    "cora-gnn-slk": (
        ["task=linkpred", "dataset=cora", "model=gnn", "loss=slk", "loss.tau_d=0.2", "loss.tau_w=2.5", "loss.t_beta=5"],
        {"hit@20": 0.4839, "mrr@100": 0.1812},
    ),
    "ml100kseq-sasrec-sl": (
        ["task=seq", "dataset=ml100k-seq", "model=sasrec", "loss=sl", "loss.tau=0.2"],
        {"hit@20": 0.1578, "ndcg@20": 0.0766},
    ),
    "ml100kseq-sasrec-slk": (
        ["task=seq", "dataset=ml100k-seq", "model=sasrec", "loss=slk", "loss.tau_d=0.2", "loss.tau_w=2.5",
         "loss.t_beta=5"],
        {"hit@20": 0.1586, "ndcg@20": 0.0780},
    ),
}


def mode_overrides(mode: str) -> list[str]:
    """per_pair: none (the paper experiments' default); shared modes also take fused Adam."""
    return [] if mode == "per_pair" else [*negatives_overrides(mode), "optimizer.fused=true"]


def cell_dir(out: Path, name: str, mode: str) -> Path:
    return out / (name if mode == "per_pair" else f"{name}-{mode.replace('/', '-g')}")


def run_cell(name: str, overrides: list[str], seeds: str, epochs: int, out: Path, mode: str = "per_pair") -> Path:
    sweep_dir = cell_dir(out, name, mode)
    done, _ = find_runs([sweep_dir]) if sweep_dir.exists() else ([], [])
    wanted = {int(s) for s in seeds.split(",")}
    todo = sorted(wanted - {r.seed for r in done if r.status == COMPLETED})
    if not todo:
        return sweep_dir
    part = sweep_dir / ("seeds-" + "-".join(map(str, todo)))
    cmd = [sys.executable, "-m", "bench", "-m", *overrides, *mode_overrides(mode), f"trainer.max_epochs={epochs}",
           "trainer.check_val_every_n_epoch=5", "logger=csv", f"hydra.sweep.dir={part}",
           f"seed={','.join(map(str, todo))}"]
    print("+", " ".join(cmd), flush=True)
    if subprocess.run(cmd, check=False).returncode != 0:
        print(f"{name}: the sweep reported failed jobs; see {part}/summary.md", flush=True)
    return sweep_dir


def reference_protocol(sweep_dir: Path, metrics: list[str]) -> dict[str, float]:
    """Mean test metrics of the sweep's best checkpoints tested as the reference code tests
    (``eval.test_masks_valid=false``: only training items masked)."""
    values: dict[str, list[float]] = {m: [] for m in metrics}
    runs, _ = find_runs([sweep_dir])
    for res in runs:
        if res.status != COMPLETED:
            continue
        _, per_user, _ = retest(res, ["eval.test_masks_valid=false"])
        for m in metrics:
            values[m].append(float(per_user[m].mean()))
    return {m: float(np.mean(v)) if v else float("nan") for m, v in values.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", nargs="*", default=["health-mf-sl", "health-mf-bpr"], choices=list(CELLS),
                        metavar="CELL", help="<dataset>-<backbone>-<loss>[-s], e.g. health-mf-sl or "
                        "ml100k-mf-lambdaloss-s; a wrong name lists them all")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--tolerance", type=float, default=0.03)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/reproduce"))
    parser.add_argument("--report-only", action="store_true", help="only summarise existing runs")
    parser.add_argument("--negatives", default="per_pair",
                        help="per_pair (the paper's), shared (one draw per batch) or shared/G (one per group of "
                             "ceil(B / G) rows); shared modes train with fused Adam")
    args = parser.parse_args()
    try:
        mode_overrides(args.negatives)
    except ConfigError as err:
        parser.error(str(err))

    rows = []
    ok = True
    for name in args.cells:
        overrides, paper = CELLS[name]
        paper = paper or dict(compose([*overrides, "output_dir=unused"]).paper)
        sweep_dir = cell_dir(args.out, name, args.negatives)
        if not args.report_only:
            run_cell(name, overrides, args.seeds, args.epochs, args.out, args.negatives)
        runs, _ = find_runs([sweep_dir]) if sweep_dir.exists() else ([], [])
        summary, _ = summarize(runs)
        if not len(summary):
            print(f"{name}: no completed runs in {sweep_dir}")
            ok = False
            continue
        summary = summary.set_index("metric")
        ref_protocol = reference_protocol(sweep_dir, list(paper))
        for metric, ref in paper.items():
            r = summary.loc[metric]
            rel = (r["mean"] - ref) / ref
            passed = abs(rel) <= args.tolerance
            ok &= passed
            alt = ref_protocol[metric]
            rows.append(f"| {name} | {metric} | {r['mean']:.4f} ± {r['ci_half']:.4f} (n={int(r['n'])}) | "
                        f"{ref:.4f} | {rel:+.1%} | {'yes' if passed else 'NO'} | "
                        f"{alt:.4f} ({(alt - ref) / ref:+.1%}) |")
    print(f"\n| cell | metric | ours (mean ± 95% CI) | paper | relative gap | within {args.tolerance:.0%} "
          "| ours, reference-code test protocol (gap) |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
