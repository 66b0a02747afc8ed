"""A screenshot of one study's leaderboard page (``python -m bench.site``), for the docs.

    python tools/site_screenshot.py [STUDY] [-o docs/img/site_<STUDY>.png] [--results results]

Builds the site into a temporary folder and photographs the top of ``<STUDY>.html`` (default
``table2-mf``: its first table and figures) in headless Chromium, driven by Playwright
(``pip install playwright``) with the system's browser (Debian: ``apt-get install chromium``;
or name one with ``BENCH_CHROMIUM=/path/to/chrome``): Playwright's own browser download is not needed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the real binaries first: Debian's /usr/bin/chromium is a shell wrapper around /usr/lib/chromium/chromium
CHROMIUM = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """A Chromium-family browser's executable (``BENCH_CHROMIUM`` first), None when there is none."""
    for name in (os.environ.get("BENCH_CHROMIUM"), *CHROMIUM):
        found = name and (name if os.access(name, os.X_OK) and os.path.isfile(name) else shutil.which(name))
        if found:
            return found
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", nargs="?", default="table2-mf")
    parser.add_argument("-o", "--out", type=Path, help="the PNG (default: docs/img/site_<study>.png)")
    parser.add_argument("--results", type=Path, default=REPO / "results")
    parser.add_argument("--width", type=int, default=1400, help="viewport width, CSS pixels")
    parser.add_argument("--height", type=int, default=1500, help="viewport height (the part photographed)")
    args = parser.parse_args(argv)
    browser_path = find_chromium()
    if browser_path is None:
        print("error: no Chromium found; apt-get install chromium, or set BENCH_CHROMIUM", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("error: pip install playwright (its browser download is not needed)", file=sys.stderr)
        return 2
    from bench.site import build_site

    out = args.out or REPO / "docs" / "img" / f"site_{args.study}.png"
    with tempfile.TemporaryDirectory() as folder:
        site = Path(folder) / "site"
        build_site(args.results, site, [args.study])
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto((site / f"{args.study}.html").as_uri())
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out))
            browser.close()
    print(f"written: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
