"""What a job costs beyond its training, under each way of running it: a tiny run (synthetic data,
one epoch: about a second of training) started directly, as a one-job sweep, as four jobs one after
another (Hydra's basic launcher), four side by side (``hydra/launcher=parallel``) and four through
SLURM (``hydra/launcher=slurm``, when ``SLURM_CONF`` names a running cluster, e.g. the one of
``scripts/slurm-local.sh``). Also the start-up of ``python -m bench --help``.

    python benchmarks/speed_launchers.py [--out results/speed/DATE-launchers.md]
"""

from __future__ import annotations

import argparse
import os
from datetime import date
from pathlib import Path

from bench_command import machine, run_bench  # benchmarks/bench_command.py (this folder is on the path)

REPO = Path(__file__).resolve().parents[1]
TINY = ["dataset.n_users=120", "dataset.n_items=80", "dataset.mean_per_user=14", "trainer.max_epochs=1",
        "loss.n_negatives=50", "train.batch_size=256"]
SLURM = ["hydra/launcher=slurm", "hydra.launcher.partition=local", "hydra.launcher.gpus_per_node=0",
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10"]
FOUR = "seed=0,1,2,3"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "speed" / f"{date.today()}-launchers.md")
    args = parser.parse_args()
    cases = [("`python -m bench --help`", ["--help"], 1),
             ("one run, directly", TINY, 1),
             ("a one-job sweep (`-m`)", ["-m", *TINY], 1),
             ("four jobs, one after another (`-m`, basic launcher)", ["-m", *TINY, FOUR], 4),
             ("four jobs side by side (`hydra/launcher=parallel`)", ["-m", "hydra/launcher=parallel", *TINY, FOUR], 4)]
    if os.environ.get("SLURM_CONF"):
        cases.append(("four jobs through SLURM (`hydra/launcher=slurm`, one node here)", ["-m", *SLURM, *TINY, FOUR],
                      4))
    rows = []
    for what, command, jobs in cases:
        seconds, _ = run_bench(command)
        rows.append(f"| {what} | {jobs} | {seconds:.1f} | {seconds / jobs:.1f} |")
        print(rows[-1], flush=True)
    text = (f"# The cost of a job under each launcher\n\n`python benchmarks/speed_launchers.py`, {date.today()}, "
            f"{machine()}, nothing else running. A tiny run: 120 users, 80 items, "
            "one epoch (about a second of training); wall time from the command to its last line.\n\n"
            "| how | jobs | wall (s) | per job (s) |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
