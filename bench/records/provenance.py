"""Where and on what a run ran: the time, the host and process, the code's git commit, the
machine (``results.json``'s ``started_at``/``finished_at``, ``host`` and ``provenance``)."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def host_info() -> dict[str, object]:
    """Where this process runs: the machine, its pid (the run lock's owner) and torch's CPU threads."""
    import torch

    return {"name": platform.node(), "pid": os.getpid(), "torch_threads": torch.get_num_threads()}


#: the folder holding the ``bench`` package: the root of a checkout, or ``site-packages`` of an install
CODE_ROOT = Path(__file__).resolve().parents[2]
GIT_TIMEOUT_S = 5.0
NOT_A_REPOSITORY = "not a repository"


def _git(root: Path, *args: str) -> str:
    # no optional locks: the jobs of a sweep ask at once, and a user may be running git meanwhile
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                          env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"}, check=True)
    return done.stdout


#: what a checkout holds that no run imports, left out of ``dirty``: the ledgers and pages that studies write
#: into the checkout as their runs finish (``results/``, ``docs/``) and Markdown; everything else counts
NOT_CODE = (":(exclude)results", ":(exclude)docs", ":(exclude,glob)**/*.md")


def code_version() -> dict[str, Any]:
    """The code that runs: ``{"commit": HEAD's sha, "dirty": uncommitted changes (untracked
    files included) outside :data:`NOT_CODE`}`` of the git checkout whose root holds the ``bench``
    package. (A study's next run would otherwise be "dirty" whenever the last one's ledger row was not
    committed yet, which says nothing about its code.)

    Anything else (no git, not a repository, an installed copy, even one inside some other
    repository) gives ``{"commit": None, "dirty": None, "note": "not a repository"}``.
    """
    root = CODE_ROOT
    try:
        top, commit = _git(root, "rev-parse", "--show-toplevel", "HEAD").splitlines()
        if Path(top).resolve() != root.resolve():
            return {"commit": None, "dirty": None, "note": NOT_A_REPOSITORY}
    except (OSError, ValueError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "note": NOT_A_REPOSITORY}
    try:
        dirty = bool(_git(root, "status", "--porcelain", "--", ".", *NOT_CODE).strip())
    except (OSError, subprocess.SubprocessError) as exc:
        return {"commit": commit, "dirty": None, "note": f"git status failed: {type(exc).__name__}"}
    return {"commit": commit, "dirty": dirty}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (AttributeError, ValueError, OSError):  # not a POSIX system that tells
        return None


def hardware_info(device: Any = None) -> dict[str, Any]:
    """The machine: CPU model, logical CPUs, total memory (GiB) and the GPU's name when
    ``device`` (a ``torch.device`` or its name) is a CUDA device (None for a run on the CPU)."""
    import torch

    dev = torch.device(device) if device is not None else None
    gpu = torch.cuda.get_device_name(dev) if dev is not None and dev.type == "cuda" and torch.cuda.is_available() \
        else None
    return {"cpu": _cpu_model(), "cpu_count": os.cpu_count(), "gpu": gpu, "memory_gb": _memory_gb()}
