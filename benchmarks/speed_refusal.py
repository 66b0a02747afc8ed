"""How fast a bad interaction file is refused, and with how much memory (issue 42, class 7: a 200 MB
file of junk used to take 18 minutes and 3.3 GB before its error).

Each case writes a file of ``--mb`` megabytes and loads it with ``dataset=custom``'s loader in a
fresh process, timing the refusal and reading the process's peak RSS:

- ``binary``: random bytes (not UTF-8);
- ``junk-lines``: a header and one good row, then lines of random words with the wrong number of
  fields (a text file that is not an interaction file);
- ``one-line``: random characters without a newline;
- ``bad-last-line``: a valid file whose only bad row is the last one: the worst case, where the
  whole file must be parsed before the error (what a good file of that size costs to read).

    python benchmarks/speed_refusal.py [--mb 200] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

LOAD = """
import resource, sys, time
from bench.datasets import CustomFile
from bench.errors import BenchError
start = time.perf_counter()
try:
    CustomFile(sys.argv[1], k_core=1).load()
    message = "loaded (no error)"
except BenchError as exc:
    message = str(exc)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{time.perf_counter() - start:.2f}\\t{peak:.0f}\\t{message[:110]}")
"""


def write(kind: str, path: Path, size: int) -> None:
    rng = random.Random(0)
    words = ["lorem", "ipsum", "dolor", "sit", "amet", "42", "x;y", "--", "NaN?"]
    with path.open("wb") as f:
        if kind == "binary":
            f.write(rng.randbytes(size))
        elif kind == "one-line":
            f.write(bytes(rng.choice(b"abcdefghij,") for _ in range(1 << 16)) * (size >> 16))
        elif kind == "junk-lines":
            f.write(b"user,item,rating\nu1,i1,5\n")
            line = (" ".join(rng.choice(words) for _ in range(12)) + "\n").encode()
            f.write(line * (size // len(line)))
        else:  # bad-last-line
            row_block = "".join(f"u{u},i{(u * 7 + k) % 5000},{1 + k % 5}\n" for u in range(2000) for k in range(10))
            block = row_block.encode()
            f.write(b"user,item,rating\n")
            for _ in range(max(1, size // len(block))):
                f.write(block)
            f.write(b"u1,i1,not-a-rating\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args()
    lines = [f"Refusing a {args.mb} MB bad file with `dataset=custom`'s loader (fresh process each; "
             f"{os.cpu_count()} cores).", "", "| file | seconds | peak RSS MiB | message |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("binary", "junk-lines", "one-line", "bad-last-line"):
            path = Path(tmp) / f"{kind}.csv"
            write(kind, path, args.mb << 20)
            done = subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{kind}: the loader crashed:\n{done.stderr[-2000:]}")
            seconds, rss, message = done.stdout.strip().splitlines()[-1].split("\t")
            lines.append(f"| {kind} | {seconds} | {rss} | {message.replace(tmp, '…').replace('|', '/')} |")
            print(lines[-1], flush=True)
            path.unlink()
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
