"""What the command-line benchmarks share: timing ``python -m bench ...`` as a user starts it, and
naming the machine a table was measured on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_bench(args: list[str]) -> tuple[float, str]:
    """(wall seconds, stdout + stderr) of ``python -m bench *args`` in a fresh folder; exits on a failure."""
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "bench", *args], cwd=folder, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"python -m bench {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return seconds, done.stdout + done.stderr


def machine() -> str:
    """``<CPU model>, <n> cores, Python <version>``."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU")
    return f"{model}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}"
