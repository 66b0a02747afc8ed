"""How long ``python -m bench`` and the reading commands take to refuse a command, against what a run
imports before training.

A refusal is answered before Lightning is imported (``bench.run`` checks the settings, locks and
checks the folder, checks a resume; ``bench.training`` and Lightning come only once the folder is
the run's). Each case is a fresh process, timed from start to exit, median of ``--rounds``:

- ``bad setting``: ``optimizer.lr=-1`` (refused by the settings' checks, before Hydra starts);
- ``used folder``: a new run into the folder of a completed run (refused by the folder's lock);
- ``resume, no folder``: ``resume=`` of a folder that does not exist;
- ``resume, nothing left``: ``resume=`` of a completed run with no more epochs (the checkpoint is read);
- the reading commands' argument errors on that completed run: ``bench.thresholds --ks 0``,
  ``bench.export --k 0``, ``bench.report --confidence -1``, and an ``--out`` that is a file
  (``bench.thresholds``, ``bench.report``): answered before the analysis stack is imported;
- and, for scale, ``python -c "import bench.training"``: what a run imports before its first step.

    python benchmarks/speed_refused_command.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_command import REPO, machine

TINY = ["dataset.n_users=120", "dataset.n_items=80", "dataset.mean_per_user=14", "trainer.max_epochs=1",
        "loss.n_negatives=50", "logger=none"]


def timed(args: list[str], cwd: Path, expect: int) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    seconds = time.perf_counter() - start
    if done.returncode != expect:
        raise SystemExit(f"python {' '.join(args)} exited {done.returncode}, not {expect}:\n{done.stderr[-2000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        timed(["-m", "bench", *TINY, "hydra.run.dir=done"], work, 0)  # a completed run to refuse
        cases = {
            "bad setting (`optimizer.lr=-1`)": (["-m", "bench", *TINY, "optimizer.lr=-1", "hydra.run.dir=x"], 2),
            "used folder (a completed run's)": (["-m", "bench", *TINY, "hydra.run.dir=done"], 2),
            "resume, no folder": (["-m", "bench", "resume=nowhere"], 2),
            "resume, nothing left to train": (["-m", "bench", "resume=done"], 0),
            "`bench.thresholds done --ks 0`": (["-m", "bench.thresholds", "done", "--ks", "0"], 2),
            "`bench.thresholds done --out done/results.json`": (
                ["-m", "bench.thresholds", "done", "--out", "done/results.json"], 2),
            "`bench.export done --k 0`": (["-m", "bench.export", "done", "--k", "0"], 2),
            "`bench.report done --confidence -1`": (["-m", "bench.report", "done", "--confidence", "-1"], 2),
            "`bench.report done --out done/results.json`": (
                ["-m", "bench.report", "done", "--out", "done/results.json"], 2),
            "for scale: `import bench.training` (what a run imports)": (["-c", "import bench.training"], 0),
        }
        print(f"Refused commands, fresh process each, median of {args.rounds} ({machine()})\n")
        print("| command | s |\n|---|---|")
        for name, (argv, code) in cases.items():
            times = [timed(argv, work, code) for _ in range(args.rounds)]
            print(f"| {name} | {statistics.median(times):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
