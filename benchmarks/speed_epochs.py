"""Seconds per training epoch of studies' rows, each run the way ``python -m bench.study`` runs it.

Each cell (``<study>/<table>/<row>`` of ``conf/study/``, e.g. table18/ml100k/lambdaloss-s) trains for a few
epochs in a fresh ``python -m bench`` process with one thread, validated once at the end, and the run's
median training epoch (``timing_s.train_epoch_median`` of results.json: sampling, forward, loss,
backward, optimiser step and the loss's after-epoch hooks) is kept. Cells take turns over
``--rounds`` rounds and the median over rounds is printed, so a machine that gets busier during the
benchmark slows every cell alike. The ledgers' ``train_epoch_s`` column records the same quantity
for every seed, but under whatever else the machine ran at the time; this is the controlled reading.

    BENCH_DATA_DIR=../shared/data python benchmarks/speed_epochs.py --cells table18/ml100k/lambdarank ...
        [--epochs 6] [--rounds 3] [--digits portable native] [--out FILE.md]

A cell may add overrides after a colon, ``table2-mf/gowalla/slk-g16f:loss.t_beta=1`` (SL@K refreshing its
thresholds every epoch: with the row's own t_beta, the median epoch is a plain one, and the schedule's
average is plain + (refresh - plain) / t_beta). They come after the row's own; the script then sets
``trainer.max_epochs``, ``trainer.check_val_every_n_epoch``, ``logger`` and ``hydra.run.dir`` itself.

``--digits portable native`` times each cell under both CPU-kernel modes (``BENCH_CPU_DIGITS``,
bench/determinism.py): what the same digits on every CPU cost against each CPU's fastest kernels,
for training epochs and for the full-ranking test (``timing_s.test``).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.errors import BenchError
from bench.records.io import read_json
from bench.study.plan import base_overrides
from bench.study.spec import load_study


def epoch_seconds(overrides: list[str], epochs: int, workdir: Path, digits: str | None = None) -> tuple[float, float]:
    """(median training-epoch seconds, test seconds) of one ``epochs``-epoch run of ``overrides``
    (one thread; ``digits``: the ``BENCH_CPU_DIGITS`` mode, None for the default)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for pinned in ("ATEN_CPU_CAPABILITY", "MKL_CBWR"):  # each mode sets its own
        env.pop(pinned, None)
    if digits is not None:
        env["BENCH_CPU_DIGITS"] = digits
    cmd = [sys.executable, "-m", "bench", *overrides, f"trainer.max_epochs={epochs}",
           f"trainer.check_val_every_n_epoch={epochs}", "logger=csv", f"hydra.run.dir={workdir}"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(overrides)} failed:\n{done.stderr[-2000:]}")
    timing = read_json(workdir / "results.json")["timing_s"]
    return float(timing["train_epoch_median"]), float(timing["test"])


def overrides_of(cell: str) -> list[str]:
    """``study/table/row[:key=value,...]`` -> the row's overrides in that table of the study, then the extra ones."""
    cell, _, extra = cell.partition(":")
    try:
        name, table, row = cell.split("/")
        study = load_study(name)
        if table not in study.tables or row not in study.rows_of(table):
            raise BenchError(f"{name} has no row {row} in a table {table}")
    except (ValueError, BenchError) as exc:
        raise SystemExit(f"--cells {cell}{':' + extra if extra else ''}: {exc} (write study/table/row[:key=value,...], "
                         "e.g. table18/ml100k/slk)") from None
    # a comma starts the next override only before "key=": list values such as eval.ks=[10,20] keep theirs
    return base_overrides(study, table, row) + [o for o in re.split(r",(?=[\w.+~/-]+=)", extra) if o]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", nargs="+", required=True)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--digits", nargs="+", choices=["portable", "native"],
                        help="time each cell under these BENCH_CPU_DIGITS modes")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args()
    cells = {cell: overrides_of(cell) for cell in args.cells}
    modes: list[str | None] = list(args.digits) if args.digits else [None]
    runs = [(c, m) for c in args.cells for m in modes]
    times: dict[tuple, list[tuple[float, float]]] = {r: [] for r in runs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for cell, mode in runs:
                where = Path(tmp) / f"{runs.index((cell, mode))}-{r}"  # a cell's name may hold ':' and '='
                times[(cell, mode)].append(epoch_seconds(cells[cell], args.epochs, where, mode))
                print(f"round {r}: {cell} {mode or ''} {times[(cell, mode)][-1][0]:.2f} s/epoch", flush=True)
    lines = [f"Median training epoch and full-ranking test over {args.rounds} rounds of {args.epochs} epochs, one "
             f"thread ({os.cpu_count()} cores).", "",
             "| cell | CPU kernels | s / epoch | test s | rounds (s / epoch) |", "|---|---|---|---|---|"]
    lines += [f"| {c} | {m or 'default'} | {statistics.median(x for x, _ in t):.2f} | "
              f"{statistics.median(y for _, y in t):.2f} | {' '.join(f'{x:.2f}' for x, _ in t)} |"
              for (c, m), t in times.items()]
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
