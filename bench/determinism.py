"""What a run's last digits depend on, and the pins that make them the same on every CPU of a kind.

PyTorch picks its CPU kernels by what the processor offers: ATen's vectorised kernels (sums,
softmax, elementwise maths) run AVX-512 code on a CPU that has it and AVX2 code otherwise, and
MKL (matrix products, vector maths) chooses its own code path the same way. The two paths add in
other orders, so the last bits differ, and training amplifies them: on 2026-12-06 the MQ2008 SL
fold 1 seed 0 run gave test NDCG@5 .640804 with AVX-512 kernels and .640280 with ATen's AVX2
ones (``ATEN_CPU_CAPABILITY=avx2``), and Cora SL seed 0 Hit@20 .54847 with MKL's AVX-512 path and
.54724 with its AVX2 path (``MKL_CBWR=AVX2``): exactly the digits a machine of the same kind
without AVX-512 reported. So, unless told otherwise, bench pins both to AVX2 (which every x86-64
machine of the kinds it runs on has): the same seed then gives the same digits on any of them.
``BENCH_CPU_DIGITS=native`` keeps the fastest kernels of each CPU (digits then depend on it).

The pins are environment variables read when torch first dispatches a kernel and when MKL starts,
so :func:`pin_cpu_digits` runs on ``import bench``, before any of bench imports torch; worker
processes (joblib, SLURM) inherit them. :func:`digits_record` states what a run actually ran with
(``results.json``: ``provenance.digits``; ledgers: the ``digits`` column). Digits also depend on the
torch version, the device (a GPU's kernels never match the CPU's) and, for some configurations,
the number of CPU threads (MQ2008 SL above gives .639577 at 2 threads): all recorded.
"""

from __future__ import annotations

import os
import platform
import warnings
from collections.abc import MutableMapping, Sequence
from typing import Any

#: ``BENCH_CPU_DIGITS``: ``portable`` (default: the pins below) or ``native`` (each CPU's fastest kernels)
MODE_ENV = "BENCH_CPU_DIGITS"
MODES = ("portable", "native")
#: the portable pins; MKL's STRICT also makes matrix products independent of the thread count
PORTABLE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT"}
#: without the pins MKL still runs strict (thread-count independent) on its own best path
NATIVE = {"MKL_CBWR": "AUTO,STRICT"}


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def portable_possible() -> bool:
    """The pins apply: an x86-64 CPU with AVX2 and FMA (elsewhere each platform keeps its kernels)."""
    return platform.machine().lower() in ("x86_64", "amd64") and {"avx2", "fma"} <= _cpu_flags()


def requested_mode(environ: MutableMapping[str, str] = os.environ) -> str:
    """The mode ``$BENCH_CPU_DIGITS`` asks for; an unknown value warns once and counts as portable."""
    mode = environ.get(MODE_ENV, "portable").strip().lower() or "portable"
    if mode not in MODES:
        warnings.warn(f"{MODE_ENV}={environ[MODE_ENV]!r} is not a mode; using portable (the same digits on every "
                      "x86-64 CPU with AVX2); set it to portable or native", stacklevel=2)
        environ[MODE_ENV] = mode = "portable"
    return mode


def pin_cpu_digits(environ: MutableMapping[str, str] = os.environ) -> str:
    """Set the kernel pins of the mode ``$BENCH_CPU_DIGITS`` asks for (a user's own setting of a
    pinned variable wins). Returns the mode applied: ``portable`` or ``native``."""
    mode = requested_mode(environ)
    if mode == "portable" and not portable_possible():
        mode = "native"
    for key, value in (PORTABLE if mode == "portable" else NATIVE).items():
        environ.setdefault(key, value)
    return mode


def run_device(cfg: Any) -> str | None:
    """The CUDA device a run's config (its ``trainer``) will train on, for its records; None on the CPU."""
    import torch

    if str(cfg.trainer.get("accelerator", "auto")) not in ("auto", "gpu", "cuda") or not torch.cuda.is_available():
        return None
    devices = cfg.trainer.get("devices")
    return f"cuda:{devices[0]}" if isinstance(devices, Sequence) and not isinstance(devices, str) and devices \
        else "cuda"


def digits_record(device: str | None = None) -> dict[str, Any]:
    """What this process's numbers depend on beyond the code, the data and the seed: the torch
    version, the CPU kernels in use (ATen's capability, MKL's path), the CPU threads, whether
    deterministic algorithms are on, and the device."""
    import torch

    return {
        "torch": torch.__version__,
        "device": device or "cpu",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "mode": requested_mode() if portable_possible() else "native",
    }


def digits_key(record: dict[str, Any]) -> str:
    """One short string of :func:`digits_record` for a ledger column: two rows whose keys are
    equal ran with the same kernels (``torch 2.13.0+cpu|cpu|AVX2|AVX2,STRICT|1t``); "" for none."""
    if not record:
        return ""
    return "|".join(str(record.get(k, "")) for k in ("torch", "device", "cpu_capability", "mkl_cbwr")) + \
        f"|{record.get('threads', '')}t"
