"""``python -m bench.site RESULTS_DIR -o OUT_DIR``: the studies' leaderboard as static HTML.

    python -m bench.site results -o site/        # site/index.html and site/<study>.html
    python -m bench.site results -o site/ --studies table2-mf table6

RESULTS_DIR is the studies' records (normally the repository's ``results/``: each study's
``summary.csv``, from ``python -m bench.study <name> report``, and its ledgers). The pages link to the
ledgers by relative paths, so keep OUT_DIR beside the repository (or inside it) when moving it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.errors import BenchError, find_user_error, one_line_usage_errors
from bench.site.build import build_site
from bench.study.spec import known_studies


def main(argv: list[str] | None = None) -> int:
    parser = one_line_usage_errors(argparse.ArgumentParser(prog="python -m bench.site", description=__doc__,
                                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("results", type=Path, help="the studies' records folder (normally results)")
    parser.add_argument("-o", "--out", type=Path, default=Path("site"), help="where the pages go (default: site)")
    parser.add_argument("--studies", nargs="+", help="only these studies (default: every one of conf/study/)")
    args = parser.parse_args(argv)
    try:
        unknown = [s for s in args.studies or [] if s not in known_studies()]
        if unknown:
            raise BenchError(f"no study {', '.join(unknown)}; known: {', '.join(known_studies())}")
        pages = build_site(args.results, args.out, args.studies)
    except (BenchError, OSError) as exc:
        error = find_user_error(exc)
        if error is None:  # an OS error that is no user's to fix (not storage): a bug, with its traceback
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"written: {pages[0]} and {len(pages) - 1} study pages in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
