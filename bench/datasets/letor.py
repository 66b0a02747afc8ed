"""Learning-to-rank lists in the LETOR / SVMlight format, and the benchmark sets that use it.

A data line is ``label [qid:Q] id:value id:value ... [# comment]``: an integer relevance label,
the query id, then 1-based feature ids with their values. Accepted as well: CRLF line ends,
blank and comment-only lines, omitted features (SVMlight is a sparse format: an omitted
feature is 0, as in every SVMlight reader; no mask is kept), and LightGBM's layout with no
``qid:`` fields where a ``<data>.query`` file gives the number of consecutive lines of each
query. Anything else (a non-numeric field, ids out of order, a query whose lines are split
by another query's, group sizes that do not add up) is a :class:`DataError` naming the file
and line.

:class:`LetorDataset` reads a fold of MQ2008 / OHSUMED (one pinned file per split), or of
MSLR-WEB10K / MSLR-WEB30K / Istella (one archive; no published checksum, see ``SOURCES``).
:class:`Standardizer` scales each feature by the training split's mean and deviation.
"""

from __future__ import annotations

import gzip
import tarfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np

from bench.datasets.download import RemoteFile, fetch
from bench.datasets.provenance import record_data_file
from bench.errors import ConfigError, DataError

FeatureOrder = Literal["ascending", "any"]
SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class LetorSplit:
    """One file of ranked lists; every query's documents are contiguous rows.

    Attributes:
        features: (n_docs, n_features) float32; a feature a line omits is 0.
        labels: (n_docs,) int64 relevance grades.
        query_ids: (n_queries,) int64, in file order (LightGBM layout: 0, 1, 2, ...).
        offsets: (n_queries + 1,) int64; query q owns rows ``offsets[q]:offsets[q + 1]``.
        comments: (n_docs,) the text after ``#`` per row (``keep_comments=True``), else None.
        source: the file it was read from (for messages).
    """

    features: np.ndarray
    labels: np.ndarray
    query_ids: np.ndarray
    offsets: np.ndarray
    comments: list[str] | None = None
    source: str = ""

    @property
    def n_docs(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_queries(self) -> int:
        return int(self.query_ids.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    def group_sizes(self) -> np.ndarray:
        """(n_queries,) documents per query."""
        return np.diff(self.offsets)


@dataclass(frozen=True)
class Standardizer:
    """Per-feature ``(x - mean) / std`` with statistics of one split (the training one): the
    validation and test lists are scaled by the training statistics, never their own.

    Attributes:
        mean: (n_features,) float64 training means.
        std: (n_features,) float64 training standard deviations (population, ddof=0); a
            feature constant on train gets 1, so it maps to 0 instead of dividing by 0.
    """

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, train: LetorSplit) -> Standardizer:
        x = train.features.astype(np.float64)
        std = x.std(axis=0)
        return cls(mean=x.mean(axis=0), std=np.where(std > 0, std, 1.0))

    def transform(self, split: LetorSplit) -> LetorSplit:
        """``split`` with standardised float32 features (labels, queries and comments shared)."""
        if split.n_features != self.mean.shape[0]:
            raise DataError(f"{split.source}: {split.n_features} features but the standardiser was fitted on "
                            f"{self.mean.shape[0]}; read every split with the same n_features")
        scaled = (split.features.astype(np.float64) - self.mean) / self.std
        return replace(split, features=scaled.astype(np.float32))


def _bad(where: str, problem: str) -> DataError:
    return DataError(f"{where}: {problem}")


def _label(token: bytes, where: str) -> int:
    try:
        return int(token)
    except ValueError:
        pass
    try:
        value = float(token)
    except ValueError:
        value = float("nan")
    if not value.is_integer():
        raise _bad(where, f"label {token.decode(errors='replace')!r} is not an integer relevance grade")
    return int(value)


def _pair(token: bytes, where: str) -> tuple[int, float]:
    key, sep, val = token.partition(b":")
    text = token.decode(errors="replace")
    if not sep:
        raise _bad(where, f"{text!r} is not an id:value pair")
    try:
        idx = int(key)
    except ValueError:
        raise _bad(where, f"feature id in {text!r} is not an integer") from None
    if idx < 1:
        raise _bad(where, f"feature id {idx} in {text!r}: ids are 1-based")
    try:
        value = float(val)
    except ValueError:
        raise _bad(where, f"value in {text!r} is not a number") from None
    if not np.isfinite(value):
        raise _bad(where, f"value in {text!r} is not finite")
    return idx, value


def _pairs(tokens: list[bytes], where: str) -> tuple[list[int], list[float]]:
    """The ids and values of a line's ``id:value`` tokens."""
    try:  # the common case at C speed; any failure is diagnosed token by token below
        keys, _, vals = zip(*(t.partition(b":") for t in tokens)) if tokens else ((), (), ())
        return list(map(int, keys)), list(map(float, vals))
    except ValueError:
        pairs = [_pair(t, where) for t in tokens]
        return [p[0] for p in pairs], [p[1] for p in pairs]


@dataclass
class _Rows:
    """A file's rows as parsed: labels, qid per row (None: no qid field), CSR (indptr, 1-based
    ids, values), each row's line number, comments."""

    labels: list[int] = field(default_factory=list)
    qids: list[int | None] = field(default_factory=list)
    indptr: list[int] = field(default_factory=lambda: [0])
    ids: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    comments: list[str] | None = None


def _parse(lines: Iterable[bytes], source: str, feature_order: FeatureOrder, keep_comments: bool) -> _Rows:
    rows = _Rows(comments=[] if keep_comments else None)
    block_end: dict[int, int] = {}  # qid -> last line of its block, to name it when the query comes back
    current: int | None = None
    has_qid: bool | None = None
    for lineno, raw in enumerate(lines, 1):
        data, _, comment = raw.rstrip(b"\r\n").partition(b"#")
        tokens = data.split()
        if not tokens:
            continue  # blank or comment-only line
        where = f"{source}:{lineno}"
        label = _label(tokens[0], where)
        if label < 0:
            raise _bad(where, f"label {label} is negative; relevance grades are integers >= 0")
        rest = tokens[1:]
        qid: int | None = None
        if rest and rest[0].startswith(b"qid:"):
            try:
                qid = int(rest[0][4:])
            except ValueError:
                raise _bad(where, f"{rest[0].decode(errors='replace')!r} is not an integer query id") from None
            rest = rest[1:]
        if has_qid is None:
            has_qid = qid is not None
        elif has_qid != (qid is not None):
            raise _bad(where, "this line has no qid: field but earlier lines do" if qid is None
                       else "this line has a qid: field but earlier lines do not; use one layout for the whole file")
        if qid is not None:
            if qid != current and qid in block_end:
                raise _bad(where, f"query {qid} comes back after other queries (its block ended at line "
                                  f"{block_end[qid]}); a query's lines must be contiguous")
            current = qid
            block_end[qid] = lineno
        ids, values = _pairs(rest, where)
        if feature_order == "any" and ids:
            kept = sorted(dict(zip(ids, values)).items())  # a repeated id keeps its last value
            ids, values = [k for k, _ in kept], [v for _, v in kept]
        rows.ids += ids
        rows.values += values
        rows.indptr.append(len(rows.ids))
        rows.labels.append(label)
        rows.qids.append(qid)
        rows.lines.append(lineno)
        if rows.comments is not None:
            rows.comments.append(comment.decode(errors="replace").strip())
    return rows


def _check_pairs(rows: _Rows, source: str, n_features: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row index, 0-based column and value of every stored pair, after the checks that need no
    Python loop (ids >= 1, ascending within a row, within n_features; finite values)."""
    ids = np.asarray(rows.ids, dtype=np.int64)
    values = np.asarray(rows.values, dtype=np.float64)
    row = np.repeat(np.arange(len(rows.labels)), np.diff(np.asarray(rows.indptr)))

    def fail(bad: np.ndarray, problem: str) -> None:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _bad(f"{source}:{rows.lines[row[i]]}", problem.format(id=ids[i], prev=ids[i - 1], value=values[i]))

    fail(ids < 1, "feature id {id}: ids are 1-based")
    same_row = np.r_[False, row[1:] == row[:-1]]
    fail(same_row & (ids <= np.r_[0, ids[:-1]]),
         "feature id {id} follows {prev}: ids must ascend without repeats (pass feature_order='any' to accept "
         "any order, a repeated id keeping its last value)")
    if n_features is not None:
        fail(ids > n_features, f"feature id {{id}} exceeds n_features={n_features}")
    fail(~np.isfinite(values), "feature {id} has the value {value}, which is not finite")
    return row, ids - 1, values


def _read_group_sizes(path: Path, n_rows: int, data_source: str) -> list[int]:
    sizes = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            text = raw.strip()
            if not text:
                continue
            try:
                size = int(text)
            except ValueError:
                raise _bad(f"{path}:{lineno}", f"{text.decode(errors='replace')!r} is not a group size "
                                               "(one integer per line)") from None
            if size < 1:
                raise _bad(f"{path}:{lineno}", f"group size {size} is not positive")
            sizes.append(size)
    if sum(sizes) != n_rows:
        raise DataError(f"{path}: the {len(sizes)} group sizes add up to {sum(sizes)} but {data_source} has "
                        f"{n_rows} rows; the query file belongs to another data file")
    return sizes


def _build(source: str, rows: _Rows, n_features: int | None, group_sizes: list[int] | None,
           group_source: str) -> LetorSplit:
    n_rows = len(rows.labels)
    if n_rows == 0:
        raise DataError(f"{source}: no data lines; is it a LETOR/SVMlight file?")
    row, cols, values = _check_pairs(rows, source, n_features)
    width = n_features if n_features is not None else int(cols.max(initial=-1)) + 1
    features = np.zeros((n_rows, width), dtype=np.float32)
    features[row, cols] = values
    if rows.qids[0] is not None:
        q = np.asarray(rows.qids, dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
        offsets = np.r_[starts, n_rows]
        query_ids = q[starts]
        if group_sizes is not None and not np.array_equal(np.diff(offsets), group_sizes):
            raise DataError(f"{group_source}: its group sizes disagree with the qid: fields of {source}; "
                            "drop the query file or fix it")
    elif group_sizes is not None:
        offsets = np.r_[0, np.cumsum(group_sizes)]
        query_ids = np.arange(len(group_sizes))
    else:
        raise DataError(f"{source}: no qid: fields and no query file ({source}.query); add qid:Q to every line "
                        "or pass query_file=")
    return LetorSplit(features=features, labels=np.asarray(rows.labels, dtype=np.int64), query_ids=query_ids,
                      offsets=offsets.astype(np.int64), comments=rows.comments, source=source)


def _query_file(path: Path, query_file: str | Path | None) -> Path | None:
    if query_file is not None:
        if not Path(query_file).is_file():
            raise DataError(f"query file {query_file} not found; pass the path of the <data>.query group sizes")
        return Path(query_file)
    sibling = path.with_name(path.name + ".query")  # LightGBM's own convention
    return sibling if sibling.is_file() else None


def read_letor(path: str | Path, n_features: int | None = None, query_file: str | Path | None = None, *,
               feature_order: FeatureOrder = "ascending", keep_comments: bool = False,
               name: str | None = None) -> LetorSplit:
    """Read one LETOR / SVMlight file.

    Args:
        path: the data file.
        n_features: the width of ``features`` (ids above it are an error); None: the largest id seen.
            Give it when reading several splits, whose largest ids may differ.
        query_file: LightGBM group sizes (one integer per line); default ``<path>.query`` when it
            exists. With ``qid:`` fields too, both must agree.
        feature_order: "ascending" (the format's rule: ids strictly increase on a line) or "any"
            (any order; a repeated id keeps its last value, as TF-Ranking's reader does).
        keep_comments: keep each line's ``# ...`` text in ``comments``.
        name: how results name the file in their provenance (default: its file name).
    Raises:
        DataError: one line naming the file, the line and the problem.
    """
    path = Path(path)
    if feature_order not in ("ascending", "any"):
        raise ConfigError(f"feature_order={feature_order!r} is not one of 'ascending', 'any'")
    if not path.is_file():
        raise DataError(f"LETOR file {path} not found")
    record_data_file(path, name)
    with open(path, "rb") as f:
        rows = _parse(f, str(path), feature_order, keep_comments)
    groups = _query_file(path, query_file)
    sizes = None
    if groups is not None:
        record_data_file(groups, f"{name}.query" if name else None)
        sizes = _read_group_sizes(groups, len(rows.labels), str(path))
    return _build(str(path), rows, n_features, sizes, str(groups))


# --------------------------------------------------------------------------------------------
# benchmark sets


@dataclass(frozen=True)
class LetorSource:
    """Where a benchmark set's splits are.

    Attributes:
        folder: its folder under the data directory (``ltr/MQ2008``).
        n_features: features per document.
        folds: number of folds (1 for a set with a single split).
        files: per-file sets: ``"FoldN/<file>" -> SHA-256``; their URL is ``url`` with ``{rel}``.
        url: per-file: a template with ``{rel}``; archive sets: the archive's URL.
        archive: archive sets: the archive's file name (None: per-file).
        sha256: archive sets: its SHA-256, None where none is published.
        members: split -> member path in the archive, with ``{fold}``; per-file sets: file name.
        page: the official page, for the manual-download message.
    """

    folder: str
    n_features: int
    folds: int
    url: str
    members: dict[str, str]
    page: str
    files: dict[str, str] = field(default_factory=dict)
    archive: str | None = None
    sha256: str | None = None


_LETOR_FILES = {"train": "Fold{fold}/train.txt", "valid": "Fold{fold}/vali.txt", "test": "Fold{fold}/test.txt"}

# From the data README (../shared/data/README.md; docs/data.md): the meta-toolkit/meta commits
# that hold LETOR 4.0 MQ2008 and LETOR 3.0
# OHSUMED (QueryLevelNorm), LF line ends.
_MQ2008 = {
    "Fold1/train.txt": "9b98c14e9536f2a18c59670714c99defc63e74359c56cba219a61db248f27123",
    "Fold1/vali.txt": "a239850bc6fe960ad08c2b7b0d99db90fe976dd93a15358e98036591b4e7a2ac",
    "Fold1/test.txt": "c68c52feb1ecae7f17b64c8e2fda2098302681bbd4ea5fad8c73a1d32a1cf2b2",
    "Fold2/train.txt": "96528d299fc07c54d8a6c7a539142be5cde1b75b15b7da875508b874e73bce91",
    "Fold2/vali.txt": "c68c52feb1ecae7f17b64c8e2fda2098302681bbd4ea5fad8c73a1d32a1cf2b2",
    "Fold2/test.txt": "cbd42504549a2388f6c0aefdb506f22074225b574c7a5df10194174c9b00e4e0",
    "Fold3/train.txt": "3886fb46484c2f55f78ce992886614dd65974f89897db18cf1127d0af259685b",
    "Fold3/vali.txt": "cbd42504549a2388f6c0aefdb506f22074225b574c7a5df10194174c9b00e4e0",
    "Fold3/test.txt": "055ac792cb8f7d5a029090b8acbfb6c57323339d1371251bf2465ac182aa8605",
    "Fold4/train.txt": "46bf4d68615328ec7933b28881129df08b8a23a4b12cb0c0a1652b48eab08b50",
    "Fold4/vali.txt": "055ac792cb8f7d5a029090b8acbfb6c57323339d1371251bf2465ac182aa8605",
    "Fold4/test.txt": "a03fe2b6e76479de60fecdb37d560a40a4e899b0cd685553d2da31ea205af1ab",
    "Fold5/train.txt": "d672fe2403743defa8642b44fa88a1d389ed9ada5a93aaece412ac563da22834",
    "Fold5/vali.txt": "a03fe2b6e76479de60fecdb37d560a40a4e899b0cd685553d2da31ea205af1ab",
    "Fold5/test.txt": "a239850bc6fe960ad08c2b7b0d99db90fe976dd93a15358e98036591b4e7a2ac",
}
_OHSUMED = {
    "Fold1/train.txt": "36f7d7d08b5adc6e7a66ec34a6240674b584086ba621eaa04915b4ce7a2b687f",
    "Fold1/vali.txt": "49975c7319672e4fba82d00c69911b8514752bb2610077a5f432d7efc2fa5fc0",
    "Fold1/test.txt": "526f9158b85fb9b6446f9c87e1ccc428f7e54d639800e108c091cb70706a88e6",
    "Fold2/train.txt": "18123df2784629855f79bf6ca2c6e13a45a08e6e98a595d30ff6568dc4afb47a",
    "Fold2/vali.txt": "526f9158b85fb9b6446f9c87e1ccc428f7e54d639800e108c091cb70706a88e6",
    "Fold2/test.txt": "77db6790a7023ed6d9bd2b9b2fa8528e1d82aa7e896863d3ed844f635870fbe2",
    "Fold3/train.txt": "5d39eaa4453aab41d4e18e1943168b72858a400b31f945debf05a884cee373c2",
    "Fold3/vali.txt": "77db6790a7023ed6d9bd2b9b2fa8528e1d82aa7e896863d3ed844f635870fbe2",
    "Fold3/test.txt": "935539d33380570cdee765e38f8c2796cb4c04d01a50e50374e8bc7d45872571",
    "Fold4/train.txt": "ab7ec44f3d2a41832531eafb3afef5c08c5881f6045584e4ee868e5a0b7c7d19",
    "Fold4/vali.txt": "935539d33380570cdee765e38f8c2796cb4c04d01a50e50374e8bc7d45872571",
    "Fold4/test.txt": "1d1ff784d9fdc4cd491a0d70fdd4dfb1adada943a0eb2e3954d74187158160da",
    "Fold5/train.txt": "113dd5c6a24224979456e6e1c3991333e6cdd9a0ed41eb50c99dfdbd22a8ad98",
    "Fold5/vali.txt": "1d1ff784d9fdc4cd491a0d70fdd4dfb1adada943a0eb2e3954d74187158160da",
    "Fold5/test.txt": "49975c7319672e4fba82d00c69911b8514752bb2610077a5f432d7efc2fa5fc0",
}

#: config name -> where its splits are. Microsoft and Istella publish no checksums for the
#: archives (sha256 None): the first download is recorded beside it and later loads are checked
#: against that record; their member layout is the documented one, not checked here.
SOURCES: dict[str, LetorSource] = {
    "mq2008": LetorSource(
        folder="ltr/MQ2008", n_features=46, folds=5, members=_LETOR_FILES, files=_MQ2008,
        url="https://raw.githubusercontent.com/meta-toolkit/meta/eab9748c3c40da28619f043c99d030e1ca66401d/"
            "data/MQ2008/{rel}",
        page="https://www.microsoft.com/en-us/research/project/letor-learning-rank-information-retrieval/"),
    "ohsumed": LetorSource(
        folder="ltr/OHSUMED", n_features=45, folds=5, members=_LETOR_FILES, files=_OHSUMED,
        url="https://raw.githubusercontent.com/meta-toolkit/meta/ca344dfe6a7bace9b818a6ad4f764c1ad581cf99/"
            "data/OHSUMED/QueryLevelNorm/{rel}",
        page="https://www.microsoft.com/en-us/research/project/letor-learning-rank-information-retrieval/"),
    "mslr-web10k": LetorSource(
        folder="ltr/MSLR-WEB10K", n_features=136, folds=5, members=_LETOR_FILES, archive="MSLR-WEB10K.zip",
        url="https://1drv.ms/u/s!AtsMfWUz5l8nbOIoJ6Ks0bEMp78", page="https://www.microsoft.com/en-us/research/project/mslr/"),
    "mslr-web30k": LetorSource(
        folder="ltr/MSLR-WEB30K", n_features=136, folds=5, members=_LETOR_FILES, archive="MSLR-WEB30K.zip",
        url="https://1drv.ms/u/s!AtsMfWUz5l8nbXGPBlwD1rnFdBY", page="https://www.microsoft.com/en-us/research/project/mslr/"),
    # Istella-S: the sampled Istella LETOR set, the one with a validation split (licence: non-commercial use)
    "istella-s": LetorSource(
        folder="ltr/istella-s", n_features=220, folds=1, archive="istella-s-letor.tar.gz",
        members={"train": "sample/train.txt", "valid": "sample/vali.txt", "test": "sample/test.txt"},
        url="http://library.istella.it/dataset/istella-s-letor.tar.gz", page="http://quickrank.isti.cnr.it/istella-dataset/"),
}


@dataclass(frozen=True)
class LetorData:
    """The three splits of one fold.

    Attributes:
        name: config name (``mq2008``).
        fold: 1-based fold.
        train, valid, test: the splits, all ``n_features`` wide (standardised with the training
            statistics when the loader was asked to).
        standardizer: the fitted :class:`Standardizer`, or None.
        info: source, URL and SHA-256 of each file read.
    """

    name: str
    fold: int
    train: LetorSplit
    valid: LetorSplit
    test: LetorSplit
    standardizer: Standardizer | None = None
    info: dict[str, Any] = field(default_factory=dict)


def check_fold(name: str, fold: Any) -> LetorSource:
    """The source of ``name`` after checking ``fold``; one-line ConfigErrors otherwise."""
    if name not in SOURCES:
        raise ConfigError(f"unknown learning-to-rank data set '{name}'; known: {', '.join(sorted(SOURCES))}")
    source = SOURCES[name]
    if isinstance(fold, bool) or not isinstance(fold, int) or not 1 <= fold <= source.folds:
        allowed = "only fold 1" if source.folds == 1 else f"folds 1..{source.folds}"
        raise ConfigError(f"dataset.fold={fold} is out of range: {name} has {allowed}")
    return source


@contextmanager
def _archive_member(path: Path, member: str, source: LetorSource) -> Iterator[IO[bytes]]:
    """An open member of a zip / tar archive, found by its path's end (a top folder is allowed)."""
    fix = (f"delete it (and {path.name}.sha256 beside it), download the archive from {source.page} and put it "
           f"at {path}")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                found = [n for n in z.namelist() if n == member or n.endswith("/" + member)]
                if not found:
                    raise DataError(f"{path} has no member {member}; {fix}")
                with z.open(found[0]) as f:
                    yield f
                return
        with tarfile.open(path, "r:*") as t:
            for info in t:
                if info.isfile() and (info.name == member or info.name.endswith("/" + member)):
                    handle = t.extractfile(info)
                    assert handle is not None  # a regular file always has one
                    with handle:
                        yield handle
                    return
            raise DataError(f"{path} has no member {member}; {fix}")
    except (tarfile.TarError, zipfile.BadZipFile, gzip.BadGzipFile, zlib.error, EOFError) as exc:
        # tarfile's message spans several lines (one per compression tried): name the type only
        raise DataError(f"{path} is not a readable zip or tar archive ({type(exc).__name__}): a share link may "
                        f"have returned a web page; {fix}") from None


class LetorDataset:
    """One fold of a learning-to-rank benchmark (``dataset=mq2008 dataset.fold=3``).

    Args:
        name: a key of :data:`SOURCES` (mq2008, ohsumed, mslr-web10k, mslr-web30k, istella-s).
        fold: 1..5 (1 for Istella-S).
        data_dir: local data directory searched first (``$BENCH_DATA_DIR``).
        cache_dir: download cache (``$BENCH_CACHE_DIR`` or ``~/.cache/bench``).
        download: allow downloading when no local copy exists.
        standardize: scale every split by the training split's per-feature mean and deviation.
    """

    def __init__(self, name: str, fold: int = 1, data_dir: str | None = None, cache_dir: str | None = None,
                 download: bool = True, standardize: bool = False) -> None:
        self.source = check_fold(name, fold)
        self.name = name
        self.fold = fold
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self.download = download
        self.standardize = standardize

    def remote_files(self) -> dict[str, RemoteFile]:
        """split -> the pinned file of this fold (for an archive set, the same archive thrice)."""
        s = self.source
        if s.archive is not None:
            archive = RemoteFile(rel=f"{s.folder}/{s.archive}", url=s.url, sha256=s.sha256)
            return {split: archive for split in SPLITS}
        out = {}
        for split in SPLITS:
            rel = s.members[split].format(fold=self.fold)
            out[split] = RemoteFile(rel=f"{s.folder}/{rel}", url=s.url.format(rel=rel), sha256=s.files[rel])
        return out

    def load(self) -> LetorData:
        s = self.source
        splits: dict[str, LetorSplit] = {}
        info: dict[str, Any] = {"n_features": s.n_features, "files": {}}
        for split, remote in self.remote_files().items():
            path = fetch(remote, self.data_dir, self.cache_dir, self.download)
            record_data_file(path, remote.rel)
            info["files"][split] = {"path": str(path), "url": remote.url, "sha256": remote.sha256}
            if s.archive is None:
                splits[split] = read_letor(path, s.n_features, name=remote.rel)
                continue
            member = s.members[split].format(fold=self.fold)
            with _archive_member(path, member, s) as f:
                where = f"{path}:{member}"
                rows = _parse(f, where, "ascending", False)
            splits[split] = _build(where, rows, s.n_features, None, "")
        scaler = Standardizer.fit(splits["train"]) if self.standardize else None
        if scaler is not None:
            splits = {k: scaler.transform(v) for k, v in splits.items()}
        return LetorData(name=self.name, fold=self.fold, standardizer=scaler, info=info, **splits)
