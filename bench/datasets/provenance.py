"""Which data files a run read, and their SHA-256.

Every loader calls :func:`record_data_file` when it opens a file; :func:`recording`
collects those calls while a run builds its data (``results.json``'s
``provenance.data_files``). Digests are cached per process by (path, size, mtime), so a
file is hashed once however often it is verified and read (about 1 ms per MB).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_DIGESTS: dict[tuple[str, int, int], str] = {}
_ACTIVE: list[dict[str, str]] = []


def _key(path: Path) -> tuple[str, int, int]:
    st = os.stat(path)
    return str(Path(path).resolve()), st.st_size, st.st_mtime_ns


def sha256_of(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of the file's bytes, computed once per (path, size, mtime) in this process."""
    key = _key(Path(path))
    digest = _DIGESTS.get(key)
    if digest is None:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(chunk):
                h.update(block)
        digest = _DIGESTS[key] = h.hexdigest()
    return digest


def record_data_file(path: str | Path, name: str | None = None) -> str:
    """Note that a loader read ``path``; returns its SHA-256.

    Args:
        path: the file opened.
        name: how results name it: its path relative to the data directory (``ir-benchmark/gowalla/proc.zip``)
            when it has one; default the file name.
    """
    digest = sha256_of(path)
    for files in _ACTIVE:
        files[name or Path(path).name] = digest
    return digest


@contextmanager
def recording() -> Iterator[dict[str, str]]:
    """``with recording() as files:`` -> ``files`` fills with ``{name: sha256}`` of every file
    recorded inside the block (nested blocks each see their own and the inner ones' files)."""
    files: dict[str, str] = {}
    _ACTIVE.append(files)
    try:
        yield files
    finally:
        _ACTIVE[:] = [f for f in _ACTIVE if f is not files]  # by identity: empty dicts compare equal
