"""The identity of the data a run used: one SHA-256 over its contents, whatever the source.

Two runs of a data set *name* may have used different data: a generator with other settings, a
user's file filtered with another ``k_core`` or split with another seed, the same file edited.
File hashes (``provenance.data_files``) miss the first two, so every run also records a digest of
the data as loaded (every array of the loaded data set, in order, with its dtype and shape), of
the test split its task ranks (link prediction splits the graph itself), and of the data settings
applied at training time (the false-positive noise). Names, paths and free-form notes are left
out: the same data read from another place has the same identity. The report never pairs runs
across identities (:func:`bench.report.runs.check_same_data`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

#: fields that name or describe data without being it
NOT_DATA = frozenset({"name", "info", "source", "_copies"})
PREFIX = "sha256:"


def _feed(h: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().contiguous().numpy()
    if isinstance(value, np.ndarray):
        if value.dtype == object:  # strings: their text, one per line
            h.update(f"object{value.shape}".encode())
            for item in value.ravel():
                h.update(str(item).encode() + b"\n")
            return
        h.update(f"{value.dtype.str}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        h.update(type(value).__name__.encode())
        for f in dataclasses.fields(value):
            if f.name not in NOT_DATA:
                h.update(f"|{f.name}=".encode())
                _feed(h, getattr(value, f.name))
        return
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            if str(key) not in NOT_DATA:
                h.update(f"|{key}=".encode())
                _feed(h, value[key])
        return
    if isinstance(value, (list, tuple)):
        h.update(f"[{len(value)}".encode())
        for item in value:
            _feed(h, item)
        h.update(b"]")
        return
    h.update(repr(value).encode())


def data_identity(data: Any, test: Any = None, settings: Mapping[str, Any] | None = None) -> str:
    """``sha256:<64 hex>`` of ``data`` (a loaded data set: dataclasses of tensors and arrays),
    the task's ``test`` split and the data ``settings`` applied at training time.

    Equal for equal contents: the name, source path and notes of the data are not part of it.
    """
    h = hashlib.sha256()
    for part, value in (("data", data), ("test", test), ("settings", dict(settings or {}))):
        h.update(f"<{part}>".encode())
        _feed(h, value)
    return PREFIX + h.hexdigest()


def short(identity: str | None, n: int = 12) -> str:
    """The first ``n`` hex digits of an identity ("" for None), for tables and messages."""
    return identity[len(PREFIX):][:n] if identity else ""
