"""Command line of :mod:`bench.export`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.errors import BenchError, one_line_usage_errors
from bench.export import __doc__ as DOC
from bench.export import export_run


def main(argv: list[str] | None = None) -> int:
    parser = one_line_usage_errors(argparse.ArgumentParser(prog="python -m bench.export", description=DOC,
                                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("run", type=Path, help="a completed run's output directory (results.json, checkpoints/)")
    parser.add_argument("--k", type=int, default=100, help="items per query (default 100)")
    # checked by export_run rather than argparse's choices, so a wrong value is one line
    parser.add_argument("--split", default="test", help="test (default) or valid")
    parser.add_argument("--checkpoint", default="best", help="best (default), last or a .ckpt path")
    parser.add_argument("--out", type=Path, help="output folder (default: RUN/export)")
    parser.add_argument("--device", default="cpu", help="where to score: cpu (default), cuda, ...")
    args = parser.parse_args(argv)
    try:
        paths = export_run(args.run, args.out, args.k, args.split, args.checkpoint, args.device)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
