"""How long a new user's first commands take: the README's one table of timings comes from here.

Runs each command as a user would (``python -m bench ...`` in a fresh folder, this machine's threads),
and reports its wall time from start to the last line and the run's own per-epoch estimate (the
tool's "time estimate: X s per epoch" line). Writes the table with the machine it ran on; with
``--readme`` it also replaces the README's table (between its ``first-hour`` markers).

    BENCH_DATA_DIR=../shared/data python benchmarks/speed_first_hour.py [--out results/speed/DATE-first-hour.md]
        [--readme]
"""

from __future__ import annotations

import argparse
import re
from datetime import date
from pathlib import Path

from bench_command import machine, run_bench  # benchmarks/bench_command.py (this folder is on the path)

REPO = Path(__file__).resolve().parents[1]
#: (what it is, the arguments of python -m bench)
COMMANDS = [
    ("the help: examples and every config group", ["--help"]),
    ("the default run (SL, synthetic data, 20 epochs)", []),
    ("the paper's Health data, SL, 2 epochs", ["dataset=health", "loss=sl", "trainer.max_epochs=2"]),
    ("a Table 2 cell, SL@20 on Health, 2 epochs", ["+experiment=paper/table2_mf_health", "loss=slk",
                                                  "trainer.max_epochs=2"]),
    ("link prediction on Cora (its GCN), 2 epochs", ["task=linkpred", "dataset=cora", "trainer.max_epochs=2"]),
    ("SASRec on Games with Table 6's recipe (task=seq's default), SL@20, 2 epochs",
     ["task=seq", "dataset=games", "loss=slk", "trainer.max_epochs=2"]),
    ("learning to rank on MQ2008 (a transformer), 2 epochs", ["task=ltr", "dataset=mq2008", "trainer.max_epochs=2"]),
    ("a seed sweep: synthetic, SL, 3 seeds", ["-m", "seed=0,1,2"]),
]
BEGIN = "<!-- first-hour table: benchmarks/speed_first_hour.py --readme -->"
END = "<!-- end of the first-hour table -->"
ESTIMATE = re.compile(r"time estimate: ([\d.]+) s per epoch \(mean")


def time_command(args: list[str]) -> tuple[float, str]:
    """(wall seconds, the run's last per-epoch estimate or "–")."""
    wall, output = run_bench(args)
    found = ESTIMATE.findall(output)
    return wall, (f"{float(found[-1]):.2f}" if found else "–")


def table(rows: list[tuple[str, list[str], float, str]]) -> str:
    lines = ["| command | what | wall (s) | s per epoch (the run's estimate) |", "|---|---|---|---|"]
    for what, args, wall, epoch in rows:
        command = " ".join(["python -m bench", *args])
        lines.append(f"| `{command}` | {what} | {wall:.1f} | {epoch} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "speed" / f"{date.today()}-first-hour.md")
    parser.add_argument("--readme", action="store_true", help="also replace the README's table")
    args = parser.parse_args()
    rows = []
    for what, command in COMMANDS:
        wall, epoch = time_command(command)
        print(f"{wall:7.1f} s  {epoch:>6} s/epoch  python -m bench {' '.join(command)}", flush=True)
        rows.append((what, command, wall, epoch))
    body = (f"Measured {date.today()} on {machine()}, nothing else running; wall time from the command to "
            f"its last line (start-up, data loading, training, test), data from a local copy "
            f"(BENCH_DATA_DIR).\n\n{table(rows)}\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"# A new user's first commands: how long they take\n\n"
                        f"`python benchmarks/speed_first_hour.py`\n\n{body}")
    print(f"written: {args.out}")
    if args.readme:
        readme = REPO / "README.md"
        text = readme.read_text()
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
        readme.write_text(text[:start] + "\n" + body + text[end:])
        print(f"written: {readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
