"""Seconds per training epoch of reproduction cells, each run the way ``reproduce_paper.py`` runs it.

Each cell (a name of ``reproduce_paper.py --cells``, e.g. ml100k-mf-lambdaloss-s) trains for a few
epochs in a fresh ``python -m bench`` process with one thread, validated once at the end, and the run's
median training epoch (``timing_s.train_epoch_median`` of results.json: sampling, forward, loss,
backward, optimiser step and the loss's after-epoch hooks) is kept. Cells take turns over
``--rounds`` rounds and the median over rounds is printed, so a machine that gets busier during the
benchmark slows every cell alike. The ledgers' ``train_epoch_s`` column records the same quantity
for every seed, but under whatever else the machine ran at the time; this is the controlled reading.

    BENCH_DATA_DIR=../shared/data python benchmarks/speed_epochs.py --cells ml100k-mf-lambdarank ...
        [--epochs 6] [--rounds 3] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from reproduce_paper import CELLS

from bench.results.io import read_json


def epoch_seconds(overrides: list[str], epochs: int, workdir: Path) -> float:
    """Median training-epoch seconds of one ``epochs``-epoch run of ``overrides`` (one thread)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "bench", *overrides, f"trainer.max_epochs={epochs}",
           f"trainer.check_val_every_n_epoch={epochs}", "logger=csv", f"hydra.run.dir={workdir}"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(overrides)} failed:\n{done.stderr[-2000:]}")
    return float(read_json(workdir / "results.json")["timing_s"]["train_epoch_median"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", nargs="+", required=True)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args()
    unknown = [c for c in args.cells if c not in CELLS]
    if unknown:
        raise SystemExit(f"unknown cell(s) {', '.join(unknown)}; known: {', '.join(sorted(CELLS))}")
    times: dict[str, list[float]] = {c: [] for c in args.cells}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for cell in args.cells:
                times[cell].append(epoch_seconds(CELLS[cell][0], args.epochs, Path(tmp) / f"{cell}-{r}"))
                print(f"round {r}: {cell} {times[cell][-1]:.2f} s/epoch", flush=True)
    lines = [f"Median training epoch over {args.rounds} rounds of {args.epochs} epochs, one thread "
             f"({os.cpu_count()} cores).", "", "| cell | s / epoch | rounds |", "|---|---|---|"]
    lines += [f"| {c} | {statistics.median(t):.2f} | {' '.join(f'{x:.2f}' for x in t)} |" for c, t in times.items()]
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
