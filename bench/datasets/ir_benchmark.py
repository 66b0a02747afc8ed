"""The SL@K paper's exact splits (GitHub ``Tiny-Snow/IR-Benchmark-Dataset``).

Each ``proc.zip`` holds ``train.tsv`` and ``test.tsv`` (header, then 0-based
``user<TAB>item`` rows) and ``summary.txt`` with the counts, which are checked on load.
Preprocessing by the data set's authors: ratings >= 3 where ratings exist, 10-core,
per-user random 80/20 train/test split.
"""

from __future__ import annotations

import logging
import re
import zipfile
from pathlib import Path

import torch

from bench.datasets.base import Interactions, canonical_pairs
from bench.datasets.download import RemoteFile, fetch
from bench.datasets.provenance import record_data_file
from bench.datasets.tables import read_table
from bench.errors import DataError

log = logging.getLogger(__name__)

COMMIT = "18bbbe892301c6013579ae70f3cab9d666878e23"
URL = "https://raw.githubusercontent.com/Tiny-Snow/IR-Benchmark-Dataset/{commit}/data_iid/{source}/proc.zip"

#: config name -> (folder in the repository, SHA-256 of its proc.zip)
SOURCES: dict[str, tuple[str, str | None]] = {
    "health": ("amazon2014-health", "56f9e4b317903b99669b7f8b9ac527a71d30f59e736138a1ae9b8aca4c7e1779"),
    "electronic": ("amazon2014-electronic", "7c67d05b3792aebaa46a7c46af438c574263f9e34e8a4ae67a40de17dc094ee0"),
    "gowalla": ("gowalla", "6412ab68a7484a2edf762f715b2397a977b40cfedad7efefd1c493608ffc1bdf"),
    "ml100k": ("movielens-100k", "4ab66c074eb9b253368b5a488974ac89a1fc59adbf0aa3e59bece5cefcd87028"),
    "ml1m": ("movielens-1m", "b0d2b0eb82076da282cd7c00d35caf1d5e0079468b78a5f434a1ef1ba55134c1"),
    "food": ("food", "36ae9d8987c9000d49bb67352cdd37fc68ef6fc70bd678d836ffe819ee9dbb03"),
    "beauty": ("amazon2014-beauty", "859ef880d3445d8502abc4b7b77f713c2d8f510ff82ebb173af87ce46417f23b"),
    "cd": ("amazon2014-cd", "3b2d0a57f4aceed5fa21eb3dd144ca5864e1e69f0ffe21e95b783752461c322b"),
    # No published checksum (not mirrored locally): the first download is recorded and
    # every later load is checked against that record.
    "book": ("amazon2014-book", None),
}


def remote_file(name: str) -> RemoteFile:
    """The pinned ``proc.zip`` of config name ``name`` (e.g. "health")."""
    if name not in SOURCES:
        raise DataError(f"unknown IR-Benchmark data set '{name}'; known: {', '.join(sorted(SOURCES))}")
    source, sha = SOURCES[name]
    return RemoteFile(rel=f"ir-benchmark/{source}/proc.zip", url=URL.format(commit=COMMIT, source=source), sha256=sha)


_SUMMARY_KEYS = {
    "n_users": r"Number of users:\s*(\d+)",
    "n_items": r"Number of items:\s*(\d+)",
    "n_train": r"Number of train interactions:\s*(\d+)",
    "n_test": r"Number of test interactions:\s*(\d+)",
}


def _parse_summary(text: str) -> dict[str, int]:
    out = {}
    for key, pattern in _SUMMARY_KEYS.items():
        m = re.search(pattern, text)
        if m:
            out[key] = int(m.group(1))
    return out


def read_proc_zip(path: Path, name: str) -> Interactions:
    """Parse a ``proc.zip`` into :class:`Interactions`, checking it against its summary."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise DataError(f"{path} is not a valid zip file; delete it and download it again") from None
    with archive:
        members = {Path(m).name: m for m in archive.namelist()}
        for needed in ("train.tsv", "test.tsv"):
            if needed not in members:
                raise DataError(f"{path} has no {needed}; is it an IR-Benchmark proc.zip?")
        splits = {}
        for split in ("train", "test"):
            member = members[f"{split}.tsv"]
            text = archive.read(member).decode("utf-8")
            users, items = read_table(text, f"{path}:{member}", "\t", [0, 1], ["int", "int"], header=True)
            splits[split] = (torch.from_numpy(users.copy()), torch.from_numpy(items.copy()))
        summary = _parse_summary(archive.read(members["summary.txt"]).decode()) if "summary.txt" in members else {}
    all_users = torch.cat([splits["train"][0], splits["test"][0]])
    all_items = torch.cat([splits["train"][1], splits["test"][1]])
    if all_users.min() < 0 or all_items.min() < 0:
        raise DataError(f"{path}: negative ids")
    n_users = int(summary.get("n_users", all_users.max() + 1))
    n_items = int(summary.get("n_items", all_items.max() + 1))
    train = canonical_pairs(torch.stack(splits["train"], 1))
    test = canonical_pairs(torch.stack(splits["test"], 1))
    found = {"n_users": int(all_users.max()) + 1, "n_items": int(all_items.max()) + 1,
             "n_train": train.shape[0], "n_test": test.shape[0]}
    for key, expected in summary.items():
        if found[key] != expected:
            raise DataError(f"{path}: {key} is {found[key]} but summary.txt says {expected}; the archive is corrupt")
    # The paper's test sets hold no training item; a custom archive might, and a test
    # item that is also a training item would be masked at test time and never counted.
    train_keys = train[:, 0] * n_items + train[:, 1]
    test_keys = test[:, 0] * n_items + test[:, 1]
    overlap = torch.isin(test_keys, train_keys)
    if overlap.any():
        log.warning("%s: dropping %d test pairs that are also training pairs", path, int(overlap.sum()))
        test = test[~overlap]
    return Interactions(name=name, n_users=n_users, n_items=n_items, train=train, test=test,
                        info={"source": str(path)})


class IRBenchmark:
    """Loader for one of the paper's splits.

    Args:
        name: config name (health, electronic, gowalla, book, ml100k, ml1m, food, beauty, cd).
        data_dir: local data directory searched first (``$BENCH_DATA_DIR``).
        cache_dir: download cache (``$BENCH_CACHE_DIR`` or ``~/.cache/bench``).
        download: allow downloading when no local copy exists.
    """

    def __init__(self, name: str, data_dir: str | None = None, cache_dir: str | None = None,
                 download: bool = True) -> None:
        self.name = name
        self.remote = remote_file(name)
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self.download = download

    def load(self) -> Interactions:
        path = fetch(self.remote, self.data_dir, self.cache_dir, self.download)
        record_data_file(path, self.remote.rel)
        data = read_proc_zip(path, self.name)
        data.info.update({"url": self.remote.url, "sha256": self.remote.sha256})
        return data
