"""Published sequence files (games, beauty-seq, ml1m-seq): pinned hashes, published counts, both layouts,
leave-one-out by file order, malformed rows."""

import hashlib

import numpy as np
import pytest
import torch

from bench.datasets import SequenceFile, load_dataset, sequence_files
from bench.datasets.download import RemoteFile
from bench.datasets.provenance import recording
from bench.datasets.sequence_files import SequenceSource, parse_sequences
from bench.datasets.sequences import leave_one_out
from bench.errors import ConfigError, DataError

# (config name, variant, file, users, items, interactions), as the data sets' authors published them
REAL = [
    ("games", "sasrec", "seq/video-sasrec/Video.txt", 31_013, 23_715, 287_107),
    ("beauty-seq", "s3rec", "seq/beauty-s3rec/Beauty.txt", 22_363, 12_101, 198_502),
    ("beauty-seq", "bert4rec", "seq/beauty-bert4rec/beauty.txt", 40_226, 54_542, 353_962),
    ("ml1m-seq", "sasrec", "seq/ml-1m-sasrec/ml-1m.txt", 6_040, 3_416, 999_611),
]


@pytest.fixture
def seq_data(shared_data):
    if not (shared_data / "seq").is_dir():
        pytest.skip(f"no seq/ under {shared_data}")
    return shared_data


def _by_user(path, layout, users):
    """Each of ``users``' items in file order, and how many users have >= 3 items, read the plain way
    (the reference for the loader)."""
    if layout == "pairs":
        pairs = np.array(path.read_text().split(), dtype=np.int64).reshape(-1, 2)
        seqs = {u: pairs[pairs[:, 0] == u, 1].tolist() for u in users}
        lengths = np.unique(pairs[:, 0], return_counts=True)[1]
    else:
        rows = {int(line.split()[0]): [int(t) for t in line.split()[1:]] for line in path.read_text().splitlines()}
        seqs = {u: rows[u] for u in users}
        lengths = np.array([len(r) for r in rows.values()])
    return seqs, int((lengths >= 3).sum())


@pytest.mark.parametrize(("name", "variant", "rel", "n_users", "n_items", "n_inter"), REAL,
                         ids=[f"{r[0]}-{r[1]}" for r in REAL])
def test_real_file_loads_with_the_published_counts(seq_data, name, variant, rel, n_users, n_items, n_inter):
    loader = SequenceFile(name, variant, data_dir=str(seq_data), download=False)
    with recording() as files:
        data = loader.load()
    assert files == {rel: hashlib.sha256((seq_data / rel).read_bytes()).hexdigest()}
    assert (data.n_users, data.n_items) == (n_users, n_items)
    assert data.train.shape[0] + data.test.shape[0] == n_inter
    # against a plain reading: the pinned files number users and items 1..n, so id k becomes k - 1;
    # timestamps are positions in the user's sequence, and test holds the last item of users with >= 3
    ref, n_evaluated = _by_user(seq_data / rel, loader.source.layout, (1, n_users // 2, n_users))
    pairs = torch.cat([data.train, data.test])
    times = torch.cat([data.train_timestamps, data.test_timestamps])
    for user, file_items in ref.items():
        mine = pairs[:, 0] == user - 1
        in_order = pairs[mine, 1][torch.argsort(times[mine])]
        assert in_order.tolist() == [i - 1 for i in file_items]
        assert sorted(times[mine].tolist()) == list(range(len(file_items)))
        last = [file_items[-1] - 1] if len(file_items) >= 3 else []
        assert data.test[data.test[:, 0] == user - 1, 1].tolist() == last
    assert data.test.shape[0] == n_evaluated


# users 3, 1, 2 (ids 2, 0, 1); items 5 6 7 8 9 10 20 30 (ids 0..7); user 2 has only two items
PER_USER_TEXT = "3 30 10 20\n1 5 6 7 8\n2 9 5\n"
PAIRS_TEXT = "3 30\n3 10\n3 20\n1 5\n1 6\n1 7\n1 8\n2 9\n2 5\n"


@pytest.mark.parametrize(("layout", "text"), [("per-user", PER_USER_TEXT), ("pairs", PAIRS_TEXT)])
def test_leave_one_out_takes_the_last_and_second_to_last_in_file_order(tmp_path, layout, text):
    path = tmp_path / "s.txt"
    path.write_text(text)
    users, items, lines = parse_sequences(path, layout)
    data = sequence_files.sequences_to_interactions("fixture", users, items)
    assert (data.n_users, data.n_items) == (3, 8)
    # the Interactions' own test split is each evaluated user's last item
    assert data.test.tolist() == [[0, 3], [2, 6]]
    splits, seq = leave_one_out(data)
    # user 0 (file 1): 5 6 | 7 | 8;  user 1 (file 2): 9 5, too short to evaluate;  user 2 (file 3): 30 | 10 | 20
    assert seq.indptr.tolist() == [0, 2, 4, 5]
    assert seq.items.tolist() == [0, 1, 4, 0, 7]  # file order, not item order
    assert seq.valid_item.tolist() == [2, -1, 5]
    assert splits.test.to_pairs().tolist() == [[0, 3], [2, 6]]
    assert splits.valid.to_pairs().tolist() == [[0, 2], [2, 5]]
    assert lines.tolist() == ([1, 1, 1, 2, 2, 2, 2, 3, 3] if layout == "per-user" else list(range(1, 10)))


def test_lines_of_interactions_count_blank_lines(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("1 2\n\n1 3\r\n  \n2 4")  # blank lines skipped, \r\n and no final newline accepted
    users, items, lines = parse_sequences(path, "pairs")
    assert users.tolist() == [1, 1, 2] and items.tolist() == [2, 3, 4] and lines.tolist() == [1, 3, 5]
    path.write_text("7 1 2\n\n8 3\n")
    users, items, lines = parse_sequences(path, "per-user")
    assert users.tolist() == [7, 7, 8] and items.tolist() == [1, 2, 3] and lines.tolist() == [1, 1, 3]


@pytest.mark.parametrize(("layout", "text", "where", "why"), [
    ("pairs", "1 2\n1 x\n", 2, r"malformed row '1 x': 'x' is not a non-negative integer id"),
    ("pairs", "1 2\n\n1 -3\n", 3, r"'-3' is not a non-negative integer id"),
    ("pairs", "1 2\n1 2.5\n", 2, r"'2\.5' is not"),
    ("pairs", "1 2\n1 2 3\n", 2, r"expected 2 fields 'user item', found 3"),
    ("pairs", "1 2\n4\n", 2, r"expected 2 fields 'user item', found 1"),
    ("pairs", "1 2\n2 3\n1 4\n", 3, r"user 1's lines are not together \(also at line 1\)"),
    ("pairs", "1 2\n1 3\n1 2\n", 3, r"user 1 has item 2 again \(first at line 1\)"),
    ("pairs", "1 12345678901234567890\n", 1, r"more than 18 digits"),
    ("per-user", "1 2 3\n2\n", 2, r"a user id without items"),
    ("per-user", "1 2 3\n2 4\n1 5\n", 3, r"user 1 has a second line \(the first is line 1\)"),
    ("per-user", "1 2 3\n2 4 é\n", 2, r"'é' is not a non-negative integer id"),
    ("per-user", "1 2 3 2\n", 1, r"user 1 has item 2 again"),
])
def test_malformed_row_names_file_and_line(tmp_path, layout, text, where, why):
    path = tmp_path / "bad.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{path}:{where}: .*{why}") as err:
        parse_sequences(path, layout)
    assert "\n" not in str(err.value)


def test_empty_file_is_refused(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n\n")
    with pytest.raises(DataError, match=rf"{path} holds no interactions"):
        parse_sequences(path, "pairs")


def _pin(monkeypatch, tmp_path, text, counts):
    """A tiny file in ``tmp_path/data`` pinned as data set ``tiny`` (variant ``v``) by its SHA-256."""
    rel = "seq/tiny/t.txt"
    path = tmp_path / "data" / rel
    path.parent.mkdir(parents=True)
    path.write_text(text)
    sha = hashlib.sha256(text.encode()).hexdigest()
    source = SequenceSource(RemoteFile(rel, "http://127.0.0.1:9/t.txt", sha), "per-user", *counts)
    monkeypatch.setitem(sequence_files.SOURCES, "tiny", {"v": source})
    return path, sha


def test_pinned_file_loads_and_a_modified_copy_is_refused(tmp_path, monkeypatch):
    path, sha = _pin(monkeypatch, tmp_path, PER_USER_TEXT, (3, 8, 9))
    loader = SequenceFile("tiny", "v", data_dir=str(tmp_path / "data"), download=False)
    data = loader.load()
    assert data.info["sha256"] == sha and data.info["variant"] == "v" and data.train.shape[0] == 7
    path.write_text(PER_USER_TEXT.replace("20", "21"))
    with pytest.raises(DataError) as err:
        SequenceFile("tiny", "v", data_dir=str(tmp_path / "data"), download=False).load()
    msg = str(err.value)
    assert msg.startswith(f"checksum mismatch for {path}: expected {sha}, got ") and "http://127.0.0.1:9/t.txt" in msg
    assert "\n" not in msg


def test_counts_other_than_the_published_ones_are_refused(tmp_path, monkeypatch):
    path, _ = _pin(monkeypatch, tmp_path, PER_USER_TEXT, (3, 9, 9))
    with pytest.raises(DataError, match=rf"^{path}: expected 3 users / 9 items / 9 interactions \(published\), "
                                        r"found 3 / 8 / 9; the file is a different version"):
        SequenceFile("tiny", "v", data_dir=str(tmp_path / "data"), download=False).load()


def test_missing_file_offline_names_the_url_and_destination(tmp_path):
    with pytest.raises(DataError) as err:
        SequenceFile("ml1m-seq", data_dir=str(tmp_path / "empty"), download=False).load()
    msg = str(err.value)
    assert "seq/ml-1m-sasrec/ml-1m.txt not found" in msg and "downloads disabled" in msg
    assert ("https://raw.githubusercontent.com/kang205/SASRec/e3738967fddab206d6eeb4fda433e7a7034dd8b1/data/ml-1m.txt"
            in msg)
    assert f"put it at {tmp_path / 'empty' / 'seq' / 'ml-1m-sasrec' / 'ml-1m.txt'}" in msg


def test_unknown_names_and_variants_are_config_errors():
    with pytest.raises(ConfigError, match=r"dataset.variant=sasrec is not a variant of beauty-seq; use one of "
                                          r"s3rec, bert4rec"):
        SequenceFile("beauty-seq", "sasrec")
    with pytest.raises(ConfigError, match=r"unknown sequence data set 'beauty'; known: games, beauty-seq, ml1m-seq"):
        SequenceFile("beauty")
    assert SequenceFile("beauty-seq").variant == "s3rec"  # the default: the S3-Rec 5-core


def test_composed_config_loads_the_s3rec_beauty(seq_data, make_cfg, tmp_path):
    cfg = make_cfg(["task=seq", "dataset=beauty-seq", f"data_dir={seq_data}"], tmp_path)
    assert cfg.dataset.variant == "s3rec"
    data = load_dataset(cfg.dataset)
    assert (data.name, data.n_users, data.n_items, data.info["variant"]) == ("beauty-seq", 22_363, 12_101, "s3rec")
    # the file's first lines: "1 1 2 3 4 5" and "2 6 7 8 9 10 4 11"
    splits, seq = leave_one_out(data)
    assert seq.items[: seq.indptr[2]].tolist() == [0, 1, 2, 5, 6, 7, 8, 9]
    assert seq.valid_item[:2].tolist() == [3, 3]
    assert splits.test.to_pairs()[:2].tolist() == [[0, 4], [1, 10]]
    other = make_cfg(["task=seq", "dataset=beauty-seq", "dataset.variant=bert4rec", f"data_dir={seq_data}"], tmp_path)
    assert SequenceFile(other.dataset.name, other.dataset.variant).source.remote.rel == "seq/beauty-bert4rec/beauty.txt"
