"""A user's own interaction file: TSV/CSV ``user, item[, timestamp]`` or a RecBole ``.inter``.

Ids may be any strings; they are remapped to contiguous integers. Duplicate pairs keep
their earliest timestamp. Then k-core filtering (users and items with fewer than k
interactions removed, repeated until stable) and a per-user random train/test split
seeded by ``split_seed`` (fixed, so every run seed sees the same test set).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bench.datasets.base import Interactions, per_user_split
from bench.datasets.download import RemoteFile, fetch
from bench.datasets.provenance import record_data_file
from bench.datasets.tables import read_table
from bench.errors import ConfigError, DataError

log = logging.getLogger(__name__)
#: bytes read and checked before the whole file is (a file of junk fails at once)
HEAD_BYTES = 1 << 20


def k_core(frame: pd.DataFrame, k: int) -> pd.DataFrame:
    """Drop users and items with fewer than ``k`` interactions until none remain."""
    if k <= 1:
        return frame
    while True:
        user_ok = frame.groupby("user")["item"].transform("size") >= k
        item_ok = frame.groupby("item")["user"].transform("size") >= k
        keep = user_ok & item_ok
        if keep.all():
            return frame
        frame = frame[keep]


def _read_inter(path: Path, text: str) -> pd.DataFrame:
    header = text.split("\n", 1)[0].rstrip("\r").split("\t")
    names = [h.split(":", 1)[0] for h in header]
    for needed in ("user_id", "item_id"):
        if needed not in names:
            raise DataError(f"{path}:1: RecBole header must name user_id and item_id fields, got {header}")
    cols = {"user": names.index("user_id"), "item": names.index("item_id")}
    kinds = {"user": "str", "item": "str"}
    for opt in ("rating", "timestamp"):
        if opt in names:
            cols[opt] = names.index(opt)
            kinds[opt] = "float"
    keys = list(cols)
    arrays = read_table(text, str(path), "\t", [cols[k] for k in keys], [kinds[k] for k in keys], header=True)
    return pd.DataFrame(dict(zip(keys, arrays)))


#: header names understood for each column role (lower case)
HEADER_NAMES = {"user": ("user", "user_id", "userid", "uid", "user id"),
                "item": ("item", "item_id", "itemid", "iid", "item id", "movie", "movie_id", "product", "product_id"),
                "rating": ("rating", "score", "stars"),
                "timestamp": ("timestamp", "time", "ts", "date", "datetime", "unix_time")}
ROLES = ("user", "item", "rating", "timestamp")
SKIP = ("-", "_", "skip")


def _roles_from_header(fields: list[str]) -> list[str] | None:
    """The role of each header field (``-`` for ignored ones), or None when the line names no
    user and no item column (it is then data, not a header)."""
    roles = []
    for field in fields:
        name = field.strip().strip('"').lower()
        roles.append(next((role for role, names in HEADER_NAMES.items() if name in names), "-"))
    return roles if "user" in roles and "item" in roles else None


def _read_delimited(path: Path, text: str, sep: str, header: bool | str, columns: list[str] | None,
                    need_rating: bool) -> pd.DataFrame:
    first = text.split("\n", 1)[0].rstrip("\r")
    fields = first.split(sep)
    if len(fields) < 2:
        raise DataError(f"{path}:1: expected at least 2 fields (user, item) separated by {sep!r}")
    named = _roles_from_header(fields)
    has_header = bool(named) if header == "auto" else bool(header)
    if columns is not None:
        roles = [c.strip().lower() for c in columns]
        unknown = [c for c in roles if c not in ROLES and c not in SKIP]
        if unknown or "user" not in roles or "item" not in roles:
            raise ConfigError(f"dataset.columns={list(columns)}: name each column user, item, rating, timestamp or "
                              "- (ignored), with a user and an item, e.g. dataset.columns=[user,item,rating,timestamp]")
        if len(roles) > len(fields):
            raise DataError(f"{path}:1: dataset.columns names {len(roles)} columns, the file has {len(fields)}")
    elif has_header and named:
        roles = named
    elif len(fields) == 2:
        roles = ["user", "item"]
    elif len(fields) == 3 and not need_rating:
        roles = ["user", "item", "timestamp"]
    else:
        raise DataError(f"{path}: {len(fields)} columns and no header naming them; say what they are, e.g. "
                        "dataset.columns=[user,item,rating,timestamp] (- for a column to ignore)")
    picked = [(i, r) for i, r in enumerate(roles) if r in ROLES]
    kinds = ["str" if r in ("user", "item") else "float" for _, r in picked]
    arrays = read_table(text, str(path), sep, [i for i, _ in picked], kinds, header=has_header)
    return pd.DataFrame({r: a for (_, r), a in zip(picked, arrays)})


class CustomFile:
    """Loader for a user's file.

    Args:
        path: the file (.tsv, .csv, .txt or RecBole .inter).
        format: "auto" (by extension), "tsv", "csv" or "inter".
        header: True, False or "auto" (a first line naming a user and an item column is a header).
        columns: the role of each column in order (``user``, ``item``, ``rating``, ``timestamp``, or
            ``-`` to ignore one); None: from the header, else user,item[,timestamp].
        min_rating: keep rows with rating >= this; the file must have a rating column.
        k_core: minimum interactions per user and item (1 disables).
        test_fraction: per-user share of interactions held out for test.
        split_seed: seed of the train/test split.
        remote: instead of ``path``, a public file ``{rel, url, sha256}`` found in
            ``data_dir`` or the cache, or downloaded and checked (see :func:`fetch`).
    """

    def __init__(self, path: str | None = None, format: str = "auto", header: bool | str = "auto",
                 columns: list[str] | None = None, min_rating: float | None = None, k_core: int = 10,
                 test_fraction: float = 0.2, split_seed: int = 0, name: str = "custom", remote: dict | None = None,
                 data_dir: str | None = None, cache_dir: str | None = None, download: bool = True) -> None:
        if not path and not remote:
            raise DataError("dataset=custom needs a file: add dataset.path=/path/to/interactions.tsv")
        self.data_name: str | None = None  # the file's name in results (provenance.data_files)
        if not path and remote is not None:
            remote_file = RemoteFile(rel=remote["rel"], url=remote["url"], sha256=remote.get("sha256"))
            path = str(fetch(remote_file, data_dir, cache_dir, download))
            self.data_name = remote_file.rel
        if not path:
            raise DataError("dataset=custom needs a file: add dataset.path=/path/to/interactions.tsv")
        self.path = Path(path).expanduser()
        self.format = format
        self.header = header
        self.columns = list(columns) if columns is not None else None
        self.min_rating = min_rating
        self.k_core = int(k_core)
        self.test_fraction = test_fraction
        self.split_seed = split_seed
        self.name = name

    def _format(self) -> str:
        if self.format != "auto":
            return self.format
        suffix = self.path.suffix.lower()
        return {".inter": "inter", ".csv": "csv"}.get(suffix, "tsv")

    def read_frame(self) -> pd.DataFrame:
        """The raw rows as a frame with columns user, item[, rating][, timestamp]."""
        if not self.path.is_file():
            raise DataError(f"interaction file {self.path} not found; set dataset.path to an existing file")
        fmt = self._format()
        if fmt not in ("tsv", "csv", "inter"):
            raise DataError(f"unknown dataset.format '{fmt}'; use auto, tsv, csv or inter")
        # the first lines first: a file of junk (or the wrong file) fails in a moment, not after
        # the whole of it has been parsed
        with self.path.open("rb") as fh:
            prefix = fh.read(HEAD_BYTES + 1)
        whole = len(prefix) <= HEAD_BYTES
        if not whole:
            if b"\n" not in prefix:
                raise DataError(f"{self.path}:1: the first line is over {HEAD_BYTES >> 20} MB long; this is no "
                                "interaction file (one user, item[, ...] row per line): check dataset.path")
            prefix = prefix[:prefix.rindex(b"\n") + 1]
        head = self._parse(self._decode(prefix), fmt)
        if whole:
            record_data_file(self.path, self.data_name)
            return head
        text = self._decode(self.path.read_bytes())
        record_data_file(self.path, self.data_name)
        return self._parse(text, fmt)

    def _decode(self, data: bytes) -> str:
        try:
            text = data.decode("utf-8-sig")  # a byte-order mark (spreadsheets write one) is no part of the header
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise DataError(f"{self.path}:{line}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
        if not text.strip():
            raise DataError(f"{self.path} is empty")
        return text

    def _parse(self, text: str, fmt: str) -> pd.DataFrame:
        if fmt == "inter":
            return _read_inter(self.path, text)
        return _read_delimited(self.path, text, "\t" if fmt == "tsv" else ",", self.header, self.columns,
                               need_rating=self.min_rating is not None)

    def load(self) -> Interactions:
        frame = self.read_frame()
        n_raw = len(frame)
        if self.min_rating is not None:
            if "rating" not in frame:
                raise DataError(f"{self.path}: dataset.min_rating={self.min_rating} needs a rating column, and none is "
                                "named; add a header or dataset.columns=[user,item,rating,...]")
            frame = frame[frame["rating"] >= self.min_rating]
        sort_cols = ["user", "item"] + (["timestamp"] if "timestamp" in frame else [])
        frame = frame.sort_values(sort_cols, kind="stable").drop_duplicates(["user", "item"], keep="first")
        frame = k_core(frame, self.k_core)
        if frame.empty:
            raise DataError(f"{self.path}: no interactions left after {self.k_core}-core filtering; "
                            "lower dataset.k_core")
        user_codes, user_ids = pd.factorize(frame["user"], sort=True)
        item_codes, item_ids = pd.factorize(frame["item"], sort=True)
        pairs = torch.from_numpy(np.stack([user_codes, item_codes], 1).astype(np.int64))
        order = torch.argsort(pairs[:, 0] * len(item_ids) + pairs[:, 1])
        pairs = pairs[order]
        times = None
        if "timestamp" in frame:
            times = torch.from_numpy(frame["timestamp"].to_numpy(np.float64).copy())[order]
        gen = torch.Generator().manual_seed(int(self.split_seed))
        n_users, n_items = len(user_ids), len(item_ids)
        # split on positions so timestamps follow their pairs
        idx_pairs = torch.stack([pairs[:, 0], torch.arange(pairs.shape[0])], 1)
        train_idx, test_idx = per_user_split(idx_pairs, n_users, self.test_fraction, gen)
        train_pos, test_pos = train_idx[:, 1], test_idx[:, 1]
        log.info("%s: %d rows read, %d interactions of %d users x %d items after filtering",
                 self.path, n_raw, pairs.shape[0], n_users, n_items)
        return Interactions(
            name=self.name, n_users=n_users, n_items=n_items,
            train=pairs[train_pos], test=pairs[test_pos],
            train_timestamps=None if times is None else times[train_pos],
            test_timestamps=None if times is None else times[test_pos],
            info={"source": str(self.path), "k_core": self.k_core, "rows_read": n_raw},
        )
