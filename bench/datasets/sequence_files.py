"""Published interaction sequences for sequential recommendation (task=seq), pinned by SHA-256.

Each file lists every user's items in time order and carries no timestamps. Two layouts:

- ``pairs``: ``user item`` per line, each user's lines together and in time order (SASRec, BERT4Rec);
- ``per-user``: ``user item1 item2 ...``, one line per user (S3-Rec).

Tokens are whitespace-separated non-negative integers; blank lines are skipped. The loader
hands out each interaction's position in its user's sequence (0, 1, 2, ...) as its timestamp,
so :func:`bench.datasets.sequences.leave_one_out` orders by file order: last item test,
second-to-last validation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench.datasets.base import Interactions
from bench.datasets.download import RemoteFile, fetch
from bench.datasets.provenance import record_data_file
from bench.errors import ConfigError, DataError

log = logging.getLogger(__name__)

PAIRS = "pairs"
PER_USER = "per-user"
LAYOUTS = (PAIRS, PER_USER)

_RAW = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
_SASREC = ("kang205/SASRec", "e3738967fddab206d6eeb4fda433e7a7034dd8b1")
_S3REC = ("RUCAIBox/CIKM2020-S3Rec", "2a81540ae18615d88ef88227b0c066e5b74781e5")
_BERT4REC = ("FeiSun/BERT4Rec", "615eaf2004abecda487a38d5b0c72f3dcfcae5b3")


@dataclass(frozen=True)
class SequenceSource:
    """A pinned sequence file and the counts its authors published.

    Attributes:
        remote: where it lives (``rel`` under the data directory) and its SHA-256.
        layout: ``pairs`` or ``per-user``.
        n_users, n_items, n_interactions: the published counts, checked on load.
    """

    remote: RemoteFile
    layout: str
    n_users: int
    n_items: int
    n_interactions: int


def _source(repo: tuple[str, str], path: str, rel: str, sha256: str, layout: str,
            counts: tuple[int, int, int]) -> SequenceSource:
    url = _RAW.format(repo=repo[0], commit=repo[1], path=path)
    return SequenceSource(RemoteFile(rel, url, sha256), layout, *counts)


#: config name -> variant (the preprocessing: whose paper/repository) -> source; the first variant is the default
SOURCES: dict[str, dict[str, SequenceSource]] = {
    "games": {
        "sasrec": _source(_SASREC, "data/Video.txt", "seq/video-sasrec/Video.txt",
                          "b7376fe24430743f411dc7f567285657b2adb3f74361cc7ba0aee94f3024b651", PAIRS,
                          (31_013, 23_715, 287_107)),
    },
    "beauty-seq": {
        # Amazon 2014 Beauty 5-core (every user and item >= 5 interactions)
        "s3rec": _source(_S3REC, "data/Beauty.txt", "seq/beauty-s3rec/Beauty.txt",
                         "226cce9c3105299ca0db9615d7d3fb32b3175e90da43100ae352599f0f0107b8", PER_USER,
                         (22_363, 12_101, 198_502)),
        # only users filtered (>= 5 interactions); most items are rarer
        "bert4rec": _source(_BERT4REC, "data/beauty.txt", "seq/beauty-bert4rec/beauty.txt",
                            "f480b7a7403852342ffd8f9809bb30697dd669be31813d0e204b698fec86ef49", PAIRS,
                            (40_226, 54_542, 353_962)),
    },
    "ml1m-seq": {
        "sasrec": _source(_SASREC, "data/ml-1m.txt", "seq/ml-1m-sasrec/ml-1m.txt",
                          "b725f3acb3986fe3130bffd1e77a74d182a1f51799567a236dbd60270f95b0a2", PAIRS,
                          (6_040, 3_416, 999_611)),
    },
}

_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 13, 32]] = True  # tab, \n, \r, space
_DIGIT = np.zeros(256, dtype=bool)
_DIGIT[48:58] = True
_MAX_DIGITS = 18  # below 2**63


def _line_text(raw: bytes, line: int) -> str:
    text = raw.split(b"\n", line)[line - 1].decode("utf-8", errors="replace").rstrip("\r")
    return text if len(text) <= 80 else text[:77] + "..."


def _malformed(path: Path, raw: bytes, line: int, why: str) -> DataError:
    return DataError(f"{path}:{line}: malformed row {_line_text(raw, line)!r}: {why}")


def _tokens(path: Path, raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Every whitespace-separated token of ``raw`` as an integer, with its 1-based line.

    Returns:
        (values (T,) int64, lines (T,) int64), in file order.
    """
    b = np.frombuffer(raw, dtype=np.uint8)
    newlines = np.flatnonzero(b == 10)
    text = ~_WS[b]
    bad = text & ~_DIGIT[b]
    if bad.any():
        line = int(np.searchsorted(newlines, int(np.argmax(bad)))) + 1
        token = next(t for t in _line_text(raw, line).split() if not (t.isascii() and t.isdigit()))
        raise _malformed(path, raw, line, f"{token!r} is not a non-negative integer id")
    edges = np.diff(text.view(np.int8), prepend=np.int8(0), append=np.int8(0))  # +1 at a token's start, -1 after it
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1) - 1
    lines = np.searchsorted(newlines, starts) + 1  # newlines before a token + 1
    length = ends - starts + 1
    if starts.size and length.max() > _MAX_DIGITS:
        line = int(lines[int(np.argmax(length > _MAX_DIGITS))])
        raise _malformed(path, raw, line, f"an id has more than {_MAX_DIGITS} digits")
    values = np.zeros(starts.size, dtype=np.int64)
    for k in range(int(length.max()) if starts.size else 0):  # the k-th digit from the right of every token
        has = length > k
        values[has] += (b[ends[has] - k].astype(np.int64) - 48) * 10**k
    return values, lines.astype(np.int64)


def parse_sequences(path: str | Path, layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read a sequence file in file order.

    Args:
        path: the file.
        layout: ``pairs`` or ``per-user`` (module docstring).
    Returns:
        (users, items, lines): three (E,) int64 arrays, the file's ids as written and the 1-based
        line of each interaction; each user's interactions are consecutive, oldest first.
    Raises:
        DataError: ``path:line: malformed row ...`` for a token that is no integer, a pairs line
            without exactly two tokens, a user line without items, a user whose lines are not
            together (pairs) or who has two lines (per-user), an item repeated in a user's sequence.
    """
    path = Path(path)
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown sequence layout '{layout}'; use one of {', '.join(LAYOUTS)}")
    raw = path.read_bytes()
    values, token_line = _tokens(path, raw)
    if values.size == 0:
        raise DataError(f"{path} holds no interactions")
    per_line = np.bincount(token_line)
    if layout == PAIRS:
        wrong = np.flatnonzero((per_line != 0) & (per_line != 2))
        if wrong.size:
            line = int(wrong[0])
            raise _malformed(path, raw, line, f"expected 2 fields 'user item', found {per_line[line]}")
        users, items, lines = values[0::2], values[1::2], token_line[0::2]
    else:
        wrong = np.flatnonzero(per_line == 1)
        if wrong.size:
            raise _malformed(path, raw, int(wrong[0]), "a user id without items; expected 'user item1 item2 ...'")
        first = np.concatenate([[True], token_line[1:] != token_line[:-1]])
        users = np.repeat(values[first], per_line[token_line[first]] - 1)
        items, lines = values[~first], token_line[~first]
    _check_grouped(path, raw, users, lines, layout)
    _check_no_repeats(path, raw, users, items, lines)
    return users, items, lines


def _check_grouped(path: Path, raw: bytes, users: np.ndarray, lines: np.ndarray, layout: str) -> None:
    run_start = np.flatnonzero(np.concatenate([[True], users[1:] != users[:-1]]))
    run_users = users[run_start]
    if np.unique(run_users).size == run_users.size:
        return
    seen: dict[int, int] = {}
    for user, start in zip(run_users.tolist(), run_start.tolist()):
        if user in seen:
            line, earlier = int(lines[start]), int(lines[seen[user]])
            if layout == PER_USER:
                why = f"user {user} has a second line (the first is line {earlier}); one line per user"
            else:
                why = (f"user {user}'s lines are not together (also at line {earlier}); each user's 'user item' "
                       "lines must be consecutive, in time order")
            raise _malformed(path, raw, line, why)
        seen[user] = start


def _check_no_repeats(path: Path, raw: bytes, users: np.ndarray, items: np.ndarray, lines: np.ndarray) -> None:
    keys = users * (int(items.max()) + 1) + items
    order = np.argsort(keys, kind="stable")
    repeated = np.flatnonzero(keys[order][1:] == keys[order][:-1])
    if repeated.size == 0:
        return
    later = order[repeated + 1]
    k = int(later.min())
    first = int(order[np.searchsorted(keys[order], keys[k])])
    raise _malformed(path, raw, int(lines[k]), f"user {users[k]} has item {items[k]} again (first at line "
                                               f"{lines[first]}); a sequence holds each item once")


def sequences_to_interactions(name: str, users: np.ndarray, items: np.ndarray, info: dict | None = None
                              ) -> Interactions:
    """:class:`Interactions` of sequences in file order (as :func:`parse_sequences` returns them).

    Ids are renumbered by rank: the k-th smallest user (item) id becomes k - 1, so a file whose
    ids are 1..n (every pinned one) gets id - 1. Timestamps are positions in the user's sequence
    (0 = oldest). ``test`` holds each user's last item when the user has at least 3 interactions
    (the users :func:`~bench.datasets.sequences.leave_one_out` evaluates), ``train`` the rest.

    Args:
        name: data set name.
        users, items: (E,) ids, each user's interactions consecutive and oldest first.
    """
    user_ids, u = np.unique(users, return_inverse=True)
    item_ids, i = np.unique(items, return_inverse=True)
    n = users.size
    run_start = np.concatenate([[True], users[1:] != users[:-1]])
    first = np.flatnonzero(run_start)
    run = np.cumsum(run_start) - 1
    position = np.arange(n) - first[run]
    length = np.diff(np.concatenate([first, [n]]))
    is_last = np.concatenate([run_start[1:], [True]])
    is_test = is_last & (length[run] >= 3)
    order = np.lexsort((i, u))  # canonical (user, item) order; timestamps follow their pairs
    pairs = torch.from_numpy(np.stack([u, i], 1)[order].astype(np.int64))
    times = torch.from_numpy(position[order].astype(np.float64))
    test = torch.from_numpy(is_test[order])
    return Interactions(name=name, n_users=user_ids.size, n_items=item_ids.size,
                        train=pairs[~test], test=pairs[test], train_timestamps=times[~test],
                        test_timestamps=times[test], info=dict(info or {}))


class SequenceFile:
    """Loader of a published sequence file (module docstring), found in ``data_dir`` or the cache,
    or downloaded, and checked against its pinned SHA-256 and published counts.

    Interactions are time-ordered by file order: timestamps are positions in each user's sequence,
    so task=seq's leave-one-out takes the last item for test and the second-to-last for validation
    (see :func:`sequences_to_interactions` for ids and the ``test`` split).

    Args:
        name: config name (games, beauty-seq, ml1m-seq; :data:`SOURCES`).
        variant: whose preprocessing (games: sasrec; beauty-seq: s3rec, the Amazon 5-core, or
            bert4rec; ml1m-seq: sasrec); None: the first listed.
        data_dir: local data directory searched first (``$BENCH_DATA_DIR``).
        cache_dir: download cache (``$BENCH_CACHE_DIR`` or ``~/.cache/bench``).
        download: allow downloading when no local copy exists.
    """

    def __init__(self, name: str, variant: str | None = None, data_dir: str | None = None,
                 cache_dir: str | None = None, download: bool = True) -> None:
        if name not in SOURCES:
            raise ConfigError(f"unknown sequence data set '{name}'; known: {', '.join(SOURCES)}")
        variants = SOURCES[name]
        variant = variant or next(iter(variants))
        if variant not in variants:
            raise ConfigError(f"dataset.variant={variant} is not a variant of {name}; use one of "
                              f"{', '.join(variants)}")
        self.name = name
        self.variant = variant
        self.source = variants[variant]
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self.download = download

    def load(self) -> Interactions:
        remote = self.source.remote
        path = fetch(remote, self.data_dir, self.cache_dir, self.download)
        record_data_file(path, remote.rel)
        users, items, _ = parse_sequences(path, self.source.layout)
        data = sequences_to_interactions(self.name, users, items, {
            "source": str(path), "url": remote.url, "sha256": remote.sha256, "variant": self.variant,
            "layout": self.source.layout, "order": "file order (no timestamps)"})
        expected = (self.source.n_users, self.source.n_items, self.source.n_interactions)
        found = (data.n_users, data.n_items, users.size)
        if found != expected:
            raise DataError(f"{path}: expected {expected[0]} users / {expected[1]} items / {expected[2]} interactions "
                            f"(published), found {found[0]} / {found[1]} / {found[2]}; the file is a different "
                            f"version: delete it and download it again from {remote.url}")
        log.info("%s (%s): %d users x %d items, %d interactions", self.name, self.variant, *found)
        return data
