"""``python -m bench.thresholds RUN_DIR``: the threshold-estimator study on a trained run.

    python -m bench.thresholds outputs/2026-11-30/10-00-00 [--checkpoint last] [--cache-from same|best|last|PATH]
        [--ks 5 20 50 100] [--estimators sampled cached ...] [--users 4096] [--out DIR]

Writes ``threshold_study.md``, ``threshold_study.csv`` and ``effective_ranks.png/svg``.
``--cache-from`` sets the model the ``cached`` estimator's top-K' lists come from: ``same``
(right after a rebuild) or an older checkpoint (a stale cache).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.errors import BenchError, one_line_usage_errors
from bench.records import COMPLETED, RunResult
from bench.records.folder import check_out_is_a_folder, writing_into
from bench.thresholds import ESTIMATORS
from bench.thresholds.registry import DEFAULT_ESTIMATORS


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (argparse prints the one-line error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is out of range: use a whole number >= 1")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is out of range: use a number > 0")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = one_line_usage_errors(argparse.ArgumentParser(prog="python -m bench.thresholds", description=__doc__,
                                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("run", type=Path, help="a CF run's output directory (results.json, checkpoints/)")
    parser.add_argument("--checkpoint", default="last", help="best, last or a path")
    parser.add_argument("--cache-from", default="same", help="same, best, last or a path")
    parser.add_argument("--ks", type=positive_int, nargs="+", default=[5, 20, 50, 100])
    parser.add_argument("--estimators", nargs="+", default=list(DEFAULT_ESTIMATORS))
    parser.add_argument("--users", type=positive_int, default=4096,
                        help="users sampled (fixed seed) on large data sets")
    parser.add_argument("--negatives", type=positive_int, help="N (default: the run's loss.n_negatives)")
    parser.add_argument("--tau-w", type=positive_float,
                        help="for the gap column (default: the run's loss.tau_w, else 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="default: RUN/threshold_study")
    args = parser.parse_args(argv)
    out = args.out or args.run / "threshold_study"
    try:
        check_out_is_a_folder(out, "study")
        for name in args.estimators:  # an unknown one names the known ones, before any model is loaded
            ESTIMATORS.get(name)
        res = RunResult.read(args.run)
        if res.status != COMPLETED:
            raise BenchError(f"{args.run} is not a completed run (status {res.live_status()}); study a run that "
                             "finished training and testing")
        # the analysis stack (Lightning, the data, the models) only once the arguments and the run passed,
        # so that a mistyped option is answered in a couple of seconds
        from bench.analysis.thresholds import load_setup, plot_ranks, run_study, to_markdown

        setup = load_setup(args.run, args.checkpoint, args.cache_from, args.users, args.negatives, args.tau_w,
                           args.seed)
        if max(args.ks) > setup.train_data.n_items:
            raise BenchError(f"--ks {max(args.ks)} exceeds the run's {setup.train_data.n_items} items; a top-K "
                             "threshold needs K below the catalogue's size")
        table, ranks = run_study(setup, tuple(args.ks), tuple(args.estimators))
        md = to_markdown(table, setup.label)
        with writing_into(args.run, out):
            out.mkdir(parents=True, exist_ok=True)
            (out / "threshold_study.md").write_text(md)
            table.to_csv(out / "threshold_study.csv", index=False)
            plot_ranks(ranks, tuple(args.ks), out)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(md)
    print(f"written: {out}/threshold_study.md, .csv, effective_ranks.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
