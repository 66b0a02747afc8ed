"""``python -m bench.study``: run, tune, follow and report a declared study (``conf/study/<name>.yaml``).

    python -m bench.study list
    python -m bench.study <name> status [--lanes 2] [--runs study-runs]
    python -m bench.study <name> run [--lanes 2 | --launcher slurm [--slurm KEY=VALUE ...]] [--tables ...] [--rows ...]
                                     [--runs DIR] [--results DIR]
    python -m bench.study <name> tune [...]           # the tuning trials only
    python -m bench.study <name> report               # results/<name>/summary.csv and docs/results/<name>.md

``run`` does what is left, tuning first, and can be stopped and run again at any time, on this
machine or another: every finished run is a row of a committed ledger (``results/<name>/``), and a
run the ledgers hold is never run again. Run folders (checkpoints, logs) go under ``--runs``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.errors import BenchError, one_line_usage_errors
from bench.parallel import cpu_count
from bench.study.lanes import run_lanes
from bench.study.plan import FINAL, TUNE
from bench.study.report import write_report
from bench.study.spec import known_studies, load_study
from bench.study.status import status


def main(argv: list[str] | None = None) -> int:
    parser = one_line_usage_errors(argparse.ArgumentParser(prog="python -m bench.study", description=__doc__,
                                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("study", help="a study of conf/study/ (or a path to a study YAML), or list")
    parser.add_argument("action", nargs="?", default="status", choices=["run", "tune", "status", "report"])
    parser.add_argument("--lanes", type=int, default=max(1, cpu_count() // 2),
                        help="runs at a time here, each with cores / lanes threads (default: half the cores)")
    parser.add_argument("--launcher", choices=["slurm"],
                        help="each run as a task on a SLURM cluster instead of lanes here")
    parser.add_argument("--slurm", nargs="+", default=[], metavar="KEY=VALUE",
                        help="fields of conf/hydra/launcher/slurm.yaml (partition=gpu timeout_min=120 ...)")
    parser.add_argument("--runs", type=Path, default=Path("study-runs"), help="where run folders go")
    parser.add_argument("--results", type=Path,
                        help="where the ledgers, summary and page go (default: results/ and docs/results/)")
    parser.add_argument("--tables", nargs="+", help="only these tables")
    parser.add_argument("--rows", nargs="+", help="only these rows")
    args = parser.parse_args(argv)
    if args.study == "list":
        for name in known_studies():
            print(f"{name}: {load_study(name).title}")
        return 0
    try:
        study = load_study(args.study, results=args.results)
        for given, known, what in ((args.tables, study.tables, "table"), (args.rows, study.rows, "row")):
            unknown = [x for x in given or [] if x not in known]
            if unknown:
                raise BenchError(f"{study.name} has no {what} {', '.join(unknown)}; its {what}s: {', '.join(known)}")
        if args.slurm and not args.launcher:
            raise BenchError("--slurm sets fields of --launcher slurm: add --launcher slurm")
        if args.lanes < 1:
            raise BenchError(f"--lanes {args.lanes}: use 1 or more")
        if args.action in ("run", "tune"):
            stages = (TUNE,) if args.action == "tune" else (TUNE, FINAL)
            if args.launcher:
                from bench.study.slurm import run_slurm

                run_slurm(study, args.runs.resolve(), args.slurm, stages, args.tables, args.rows)
            else:
                run_lanes(study, args.runs, args.lanes, stages, args.tables, args.rows)
            print(status(study, args.runs, args.lanes), end="")
        elif args.action == "status":
            print(status(study, args.runs, args.lanes), end="")
        else:
            summary, page = write_report(study, *([args.results] if args.results else []))
            print(page.read_text(), end="")
            print(f"written: {summary}, {page}", file=sys.stderr)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
