"""Command line of :mod:`bench.report`."""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from bench.errors import BenchError, one_line_usage_errors
from bench.records import RESULTS_FILE
from bench.records.folder import check_out_is_a_folder, writing_into
from bench.report import __doc__ as DOC


def _filters(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep:
            raise BenchError(f"--filter {item!r}: use KEY=VALUE, e.g. config.dataset.name=health")
        value: Any = text
        for cast in (int, float):
            try:
                value = cast(text)
                break
            except ValueError:
                continue
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = one_line_usage_errors(argparse.ArgumentParser(prog="python -m bench.report", description=DOC,
                                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("paths", nargs="*", type=Path, help="run or sweep directories (searched recursively)")
    parser.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read finished training runs from W&B instead")
    parser.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                        help="W&B run filter, e.g. config.dataset.name=health (repeatable)")
    parser.add_argument("--metrics", nargs="+", default=["recall@20", "ndcg@20"],
                        help="test metrics; edge:<metric> for link prediction's per-edge protocol (edge:mrr), "
                             "sampled:<metric> for the biased sampled protocol (sampled:hit@10), "
                             "ref:<metric> for the SL@K reference code's test protocol, from run ledgers (ref:ndcg@20)")
    parser.add_argument("--baseline", help="row (loss name, or loss plus variant) to compare the others with")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the marks")
    parser.add_argument("--correction", choices=["holm", "bh", "bonferroni", "none"], default="holm",
                        help="multiple-comparison correction over a table's rows: holm (default), bh "
                             "(Benjamini-Hochberg false discovery rate, for many losses at once), bonferroni, none")
    parser.add_argument("--out", type=Path, help="where to write report.md/.csv/.tex and the plots "
                        "(default: the single path given, else ./report)")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    try:
        # the arguments first: a mistyped one is answered before any run is read (reading composes
        # each run's settings, which imports Hydra and torch)
        if bool(args.paths) == bool(args.wandb):
            raise BenchError("give run/sweep directories or --wandb ENTITY/PROJECT (one of the two)")
        for flag, value, example in (("--confidence", args.confidence, 0.95), ("--alpha", args.alpha, 0.05)):
            if not 0 < value < 1:
                raise BenchError(f"{flag} {value} is out of range: use a share in (0, 1), e.g. {flag} {example}")
        out = args.out or (args.paths[0] if len(args.paths) == 1 and args.paths[0].is_dir() else Path("report"))
        check_out_is_a_folder(out, "report")
        from bench.collect import from_directories
        from bench.report import from_wandb, make_report

        if args.wandb:
            records, notes = from_wandb(args.wandb, _filters(args.filter))
        else:
            records, notes = from_directories(args.paths)
        if not records:
            raise BenchError("no completed runs found" + (": " + "; ".join(notes) if notes else ""))
        # into a run's own folder only as the run's lock allows, and through no link there
        run_dir = next((p for p in (out, *out.parents) if (p / RESULTS_FILE).is_file()), None)
        with writing_into(run_dir, out) if run_dir is not None else nullcontext():
            report = make_report(records, args.metrics, args.baseline, args.confidence, args.alpha, args.correction,
                                 out_dir=out, plots=not args.no_plots)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.markdown)
    for note in notes + report.notes:
        print(f"note: {note}", file=sys.stderr)
    print("written: " + ", ".join(str(p) for p in report.files), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
