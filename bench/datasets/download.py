"""Finding, downloading and verifying data files.

Lookup order for a file with relative path ``rel``:
1. ``<data_dir>/<rel>`` (``data_dir`` config key, default ``$BENCH_DATA_DIR``),
2. ``<cache_dir>/<rel>`` (default ``$BENCH_CACHE_DIR`` or ``~/.cache/bench``),
3. download from the public URL into the cache, then verify.
Every file is checked against its pinned SHA-256 before use; the loader that then reads it
records it (:func:`bench.datasets.provenance.record_data_file`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.datasets.provenance import sha256_of
from bench.errors import DataError

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 60


@dataclass(frozen=True)
class RemoteFile:
    """A public file pinned by checksum.

    Attributes:
        rel: path relative to a data directory, e.g. ``ir-benchmark/gowalla/proc.zip``.
        url: where to download it.
        sha256: expected hex digest; None when the source publishes none (the first
            download is then trusted, recorded beside the file and checked afterwards).
    """

    rel: str
    url: str
    sha256: str | None


def sha256sum(path: Path) -> str:
    """Hex SHA-256 of a file; cached per (path, size, mtime), so the loader that reads the file
    after its verification records the same digest without reading it again."""
    return sha256_of(path)


def default_cache_dir() -> Path:
    return Path(os.environ.get("BENCH_CACHE_DIR") or Path.home() / ".cache" / "bench")


def _verify(path: Path, remote: RemoteFile) -> None:
    expected = remote.sha256
    pinned_by_us = False
    if expected is None:
        record = path.with_name(path.name + ".sha256")
        if not record.exists():
            log.warning("%s has no published checksum; trusting this copy and recording its hash in %s", path, record)
            record.write_text(sha256sum(path) + "\n")
            return
        expected = record.read_text().strip()
        pinned_by_us = True
    got = sha256sum(path)
    if got != expected:
        what = "the hash recorded at first download" if pinned_by_us else "the pinned SHA-256"
        raise DataError(
            f"checksum mismatch for {path}: expected {expected}, got {got} ({what}); "
            f"the file is corrupt or a different version: delete it and download it again from {remote.url}"
        )


def _download(url: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as resp:
            shutil.copyfileobj(resp, out)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def fetch(remote: RemoteFile, data_dir: str | Path | None = None, cache_dir: str | Path | None = None,
          download: bool = True) -> Path:
    """Local, verified path of ``remote``.

    Args:
        remote: the file to find.
        data_dir: a local data directory searched first (None: skip).
        cache_dir: where downloads go (None: :func:`default_cache_dir`).
        download: try the URL when no local copy exists.
    Raises:
        DataError: not found and not downloadable (names the URL and where to put the
            file), or checksum mismatch.
    """
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    candidates = []
    if data_dir:
        candidates.append(Path(data_dir).expanduser() / remote.rel)
    candidates.append(cache / remote.rel)
    for path in candidates:
        if path.is_file():
            _verify(path, remote)
            return path
    target = cache / remote.rel
    reason = "downloads disabled"
    if download:
        log.info("downloading %s -> %s", remote.url, target)
        try:
            _download(remote.url, target)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = f"download failed: {getattr(exc, 'reason', exc)}"
        else:
            try:
                _verify(target, remote)
            except DataError:
                target.unlink()  # never leave a bad download where the next run would find it
                raise
            return target
    where = candidates[0]
    raise DataError(
        f"data file {remote.rel} not found (looked in {', '.join(str(p) for p in candidates)}; {reason}); "
        f"download {remote.url} and put it at {where}"
        + ("" if data_dir else " (or set BENCH_DATA_DIR to a directory that holds it)")
    )
