"""Keeping freed buffers in the process (glibc's ``mallopt``).

glibc serves an allocation above its mmap threshold (at most 32 MiB, adjusted at run time) with
a fresh ``mmap`` and returns it to the kernel when freed, so the next buffer of that size is
page-faulted and zeroed again. A full-ranking evaluation allocates a 64 MiB score chunk per
chunk of users and a per-pair Gowalla step several (1024, 40,988) score matrices per batch:
measured on 2 CPU cores, that refaulting is ~20% of an Electronic evaluation pass and ~1/3 of
a per-pair Gowalla step (320 -> 210 ms). Raising the mmap and trim thresholds keeps freed
blocks in the heap for reuse; the process then holds on to its peak memory instead of giving
it back between steps. Results do not change (allocation addresses do not enter any kernel's
arithmetic; tested bit-identical).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

import torch

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
#: allocations up to this size come from the heap and are reused after being freed
MMAP_THRESHOLD = 1 << 30
_TRIM_THRESHOLD = 2**31 - 1


def retain_freed_memory(enabled: bool = True) -> str:
    """Ask glibc to keep freed blocks up to :data:`MMAP_THRESHOLD` for reuse.

    Args:
        enabled: False leaves the allocator as it is (``retain_freed_memory=false``).
    Returns:
        what was done, for the run log: ``"retained"``, ``"off"`` or ``"unavailable"`` (not
        glibc, e.g. macOS or musl; nothing changes there).
    """
    if not enabled:
        return "off"
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return "unavailable"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) != 1:
        return "unavailable"
    return "retained"


def skip_uninitialised_fill() -> None:
    """Leave new tensors unfilled under deterministic kernels, as they are without them.

    ``torch.use_deterministic_algorithms`` (``trainer.deterministic``, on by default) also makes
    PyTorch fill every buffer it allocates uninitialised (``torch.empty``, most kernels' outputs)
    with NaN, so that a kernel reading memory it never wrote would show. No kernel here does: every
    case of ``tools/identity_grid.py`` (each task, backbone, loss, estimator and negative
    mode) gives the same numbers to the last bit with and without the fill. The fill writes each
    new buffer once more, which was ~10% of a Gowalla shared step (sampled with py-spy)."""
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]  # a module property
