"""LETOR / SVMlight reading: the two library fixtures, every format case on hand-written files, one-line
errors with file and line, MQ2008 / OHSUMED folds, archives, the train-only standardiser, the configs."""

import tarfile
import zipfile

import numpy as np
import pytest
from hydra.utils import instantiate

from bench.composition import compose
from bench.datasets import LetorDataset, Standardizer, read_letor
from bench.datasets.letor import LetorSplit
from bench.datasets.noise import NOISE_KEYS
from bench.errors import ConfigError, DataError, find_user_error


@pytest.fixture
def ltr(shared_data):
    if not (shared_data / "ltr").is_dir():
        pytest.skip(f"no ltr/ in {shared_data}")
    return shared_data / "ltr"


def _write(path, text, newline="\n"):
    path.write_bytes(text.replace("\n", newline).encode())
    return path


# ---------------------------------------------------------------------------------------- fixtures


def test_lightgbm_lambdarank_fixture_takes_its_groups_from_the_query_file(ltr):
    train = read_letor(ltr / "lightgbm-lambdarank" / "rank.train")  # rank.train.query found beside it
    assert (train.n_docs, train.n_queries, train.n_features) == (3005, 201, 300)
    assert train.group_sizes()[:3].tolist() == [1, 13, 5] and train.offsets[-1] == 3005
    assert train.query_ids[:3].tolist() == [0, 1, 2]  # no qid fields: the groups are numbered
    assert np.bincount(train.labels).tolist() == [645, 1211, 858, 222, 69]
    # line 1: "0 10:0.89 11:0.75 12:0.01 ... 300:0.43"; line 2: "1 1:0.69 ... 300:0.25"
    assert train.labels[:2].tolist() == [0, 1]
    assert train.features[0, [0, 9, 10, 11, 280, 299]] == pytest.approx([0, 0.89, 0.75, 0.01, 0.91, 0.43])
    assert train.features[1, [0, 299]] == pytest.approx([0.69, 0.25])
    assert train.features.dtype == np.float32
    test = read_letor(ltr / "lightgbm-lambdarank" / "rank.test", n_features=300,
                      query_file=ltr / "lightgbm-lambdarank" / "rank.test.query")
    assert (test.n_docs, test.n_queries, test.n_features) == (768, 50, 300)
    assert test.group_sizes()[:2].tolist() == [12, 19]
    assert np.bincount(test.labels).tolist() == [206, 256, 252, 44, 10]


def test_tfr_toy_fixture_needs_any_order_and_keeps_a_repeated_ids_last_value(ltr):
    path = ltr / "tfr-toy" / "train.txt"
    with pytest.raises(DataError, match=r"tfr-toy/train\.txt:1: feature id 5 follows 115: ids must ascend"):
        read_letor(path)
    toy = read_letor(path, feature_order="any")
    assert (toy.n_docs, toy.n_queries, toy.n_features) == (119, 27, 136)
    assert toy.group_sizes().tolist() == [4, 4, 9, 3, 5, 1, 4, 7, 7, 2, 3, 9, 1, 2, 1, 1, 7, 6, 1, 3, 9, 1, 2, 8,
                                          7, 3, 9]
    assert toy.query_ids[14:17].tolist() == [15, 17, 18]  # qid 16 absent: ids are kept, not renumbered
    assert np.bincount(toy.labels).tolist() == [43, 35, 41]
    # line 1: "0 qid:1 115:-0.617277 5:-0.109573 17:-0.763873 17:0.369905 ... 42:-0.983709"
    assert toy.features[0, [114, 4, 16, 41, 0]] == pytest.approx([-0.617277, -0.109573, 0.369905, -0.983709, 0])
    assert np.count_nonzero(toy.features[0]) == 18  # 19 pairs, one id repeated
    test = read_letor(ltr / "tfr-toy" / "test.txt", n_features=136, feature_order="any")
    assert (test.n_docs, test.n_queries) == (36, test.query_ids.size) and test.group_sizes()[:3].tolist() == [4, 6, 9]


# ---------------------------------------------------------------------------------------- format cases


def test_crlf_comments_blank_lines_missing_features_and_qid_order(tmp_path):
    text = ("# a header comment\n"
            "2 qid:30 1:0.5 3:-1.25 # docid = A\n"
            "\n"
            "0 qid:30 2:1e-3   # docid = B\n"
            "   \n"
            "1 qid:7 1:2 2:3 3:4\n"
            "# between queries\n"
            "0 qid:7\n"
            "3 qid:12 3:0.25#no space before the comment\n")
    for newline in ("\n", "\r\n"):
        split = read_letor(_write(tmp_path / "f.txt", text, newline), keep_comments=True)
        assert split.labels.tolist() == [2, 0, 1, 0, 3]
        assert split.query_ids.tolist() == [30, 7, 12]  # file order, not sorted
        assert split.offsets.tolist() == [0, 2, 4, 5]
        expected = [[0.5, 0, -1.25], [0, 1e-3, 0], [2, 3, 4], [0, 0, 0], [0, 0, 0.25]]
        assert np.array_equal(split.features, np.asarray(expected, dtype=np.float32))
        assert split.comments == ["docid = A", "docid = B", "", "", "no space before the comment"]
    assert read_letor(tmp_path / "f.txt").comments is None
    wide = read_letor(tmp_path / "f.txt", n_features=5)
    assert wide.features.shape == (5, 5) and not wide.features[:, 3:].any()


def test_query_file_with_qid_fields_must_agree(tmp_path):
    data = _write(tmp_path / "d.txt", "1 qid:1 1:1\n0 qid:1 1:2\n0 qid:2 1:3\n")
    good = _write(tmp_path / "good.query", "2\n1\n")
    assert read_letor(data, query_file=good).query_ids.tolist() == [1, 2]
    with pytest.raises(DataError, match=r"bad\.query: its group sizes disagree with the qid: fields of .*d\.txt"):
        read_letor(data, query_file=_write(tmp_path / "bad.query", "1\n2\n"))


MALFORMED = [
    ("1 qid:1 1:0.5 2:abc\n", 1, r"value in '2:abc' is not a number"),
    ("1 qid:1 1:0.5\nx qid:1 1:0.5\n", 2, r"label 'x' is not an integer relevance grade"),
    ("1 qid:1 1:0.5\n1.5 qid:1 1:0.5\n", 2, r"label '1.5' is not an integer"),
    ("-1 qid:1 1:0.5\n", 1, r"label -1 is negative"),
    ("1 qid:q7 1:0.5\n", 1, r"'qid:q7' is not an integer query id"),
    ("1 qid:1 1:0.5\n1 qid:1 3:0.5 2:0.1\n", 2, r"feature id 2 follows 3: ids must ascend without repeats"),
    ("1 qid:1 1:0.5 1:0.7\n", 1, r"feature id 1 follows 1"),
    ("1 qid:1 0:0.5 1:0.7\n", 1, r"feature id 0: ids are 1-based"),
    ("1 qid:1 x:0.5\n", 1, r"feature id in 'x:0.5' is not an integer"),
    ("1 qid:1 1:0.5 0.7\n", 1, r"'0.7' is not an id:value pair"),
    ("1 qid:1 1:0.5:2\n", 1, r"value in '1:0.5:2' is not a number"),
    ("1 qid:1 1:nan\n", 1, r"feature 1 has the value nan, which is not finite"),
    ("1 qid:1 1:0.5 2:-inf\n", 1, r"feature 2 has the value -inf, which is not finite"),
    ("1 qid:1 1:1\n0 qid:2 1:1\n\n0 qid:1 1:1\n", 4, r"query 1 comes back after other queries \(its block ended "
                                                     r"at line 1\); a query's lines must be contiguous"),
    ("1 qid:1 1:1\n0 1:1\n", 2, r"this line has no qid: field but earlier lines do"),
    ("1 1:1\n0 qid:1 1:1\n", 2, r"this line has a qid: field but earlier lines do not"),
    ("1 qid:1 1:1 4:2\n", 1, r"feature id 4 exceeds n_features=3"),
]


@pytest.mark.parametrize(("text", "line", "problem"), MALFORMED)
def test_a_malformed_line_is_one_error_naming_file_and_line(tmp_path, text, line, problem):
    path = _write(tmp_path / "bad.txt", text, "\r\n")  # line numbers hold with CRLF too
    with pytest.raises(DataError, match=rf"bad\.txt:{line}: {problem}") as err:
        read_letor(path, n_features=3)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("data", "groups", "message"), [
    ("1 1:1\n0 1:2\n", None, r"d\.txt: no qid: fields and no query file .*pass query_file="),
    ("1 1:1\n0 1:2\n0 1:3\n", "2\n2\n", r"d\.txt\.query: the 2 group sizes add up to 4 but .*d\.txt has 3 rows"),
    ("1 1:1\n0 1:2\n", "2\nx\n", r"d\.txt\.query:2: 'x' is not a group size"),
    ("1 1:1\n0 1:2\n", "2\n0\n", r"d\.txt\.query:2: group size 0 is not positive"),
    ("# only a comment\n\n", None, r"d\.txt: no data lines"),
])
def test_group_problems_are_one_line_errors(tmp_path, data, groups, message):
    path = _write(tmp_path / "d.txt", data)
    if groups is not None:
        _write(tmp_path / "d.txt.query", groups)
    with pytest.raises(DataError, match=message) as err:
        read_letor(path)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------- standardiser


def _split(features):
    x = np.asarray(features, dtype=np.float32)
    return LetorSplit(features=x, labels=np.zeros(len(x), dtype=np.int64), query_ids=np.array([1]),
                      offsets=np.array([0, len(x)]))


def test_the_standardiser_uses_the_training_statistics_only():
    train = _split([[1, 5], [3, 5]])  # feature 1: mean 2, std 1; feature 2 constant: std 0 -> 1
    scaler = Standardizer.fit(train)
    assert scaler.mean.tolist() == [2, 5] and scaler.std.tolist() == [1, 1]
    assert scaler.transform(train).features.tolist() == [[-1, 0], [1, 0]]
    valid = _split([[10, 7], [20, 9]])  # its own statistics would give +-1 in both columns
    assert scaler.transform(valid).features.tolist() == [[8, 2], [18, 4]]
    with pytest.raises(DataError, match=r"3 features but the standardiser was fitted on 2"):
        scaler.transform(_split([[1, 2, 3]]))


def test_a_standardised_fold_is_scaled_by_its_training_split(ltr):
    raw = LetorDataset("mq2008", 1, data_dir=str(ltr.parent), download=False).load()
    scaled = LetorDataset("mq2008", 1, data_dir=str(ltr.parent), download=False, standardize=True).load()
    mean, std = raw.train.features.mean(0, dtype=np.float64), raw.train.features.std(0, dtype=np.float64)
    std[std == 0] = 1
    assert np.abs(scaled.train.features.mean(0)).max() < 1e-4
    for split in ("valid", "test"):
        expected = (getattr(raw, split).features - mean) / std
        assert np.allclose(getattr(scaled, split).features, expected, atol=1e-5)
        assert np.abs(getattr(scaled, split).features.mean(0)).max() > 0.01  # not centred on its own mean
    assert np.array_equal(scaled.valid.labels, raw.valid.labels)


# ---------------------------------------------------------------------------------------- benchmark sets


def test_mq2008_and_ohsumed_fold1_have_the_published_counts(ltr):
    mq = LetorDataset("mq2008", 1, data_dir=str(ltr.parent), download=False).load()
    counts = {s: (getattr(mq, s).n_docs, getattr(mq, s).n_queries, np.bincount(getattr(mq, s).labels).tolist())
              for s in ("train", "valid", "test")}
    assert counts == {"train": (9630, 471, [7820, 1223, 587]), "valid": (2707, 157, [2140, 400, 167]),
                      "test": (2874, 156, [2319, 378, 177])}
    assert mq.train.n_features == 46 and mq.train.query_ids[0] == 10002
    assert mq.train.features[0, :3].tolist() == pytest.approx([0.007477, 0, 1])
    queries = [set(getattr(mq, s).query_ids.tolist()) for s in ("train", "valid", "test")]
    assert not (queries[0] & queries[1] or queries[0] & queries[2] or queries[1] & queries[2])
    oh = LetorDataset("ohsumed", 1, data_dir=str(ltr.parent), download=False).load()
    assert [(getattr(oh, s).n_docs, getattr(oh, s).n_queries) for s in ("train", "valid", "test")] == \
        [(9219, 63), (3538, 21), (3383, 22)]
    assert oh.train.n_features == 45 and oh.info["files"]["test"]["sha256"].startswith("526f9158")


def _archive_lines(fold, split):
    return f"{split == 'train' and 2 or 1} qid:{fold}{len(split)} 1:0.5 136:{fold}\n0 qid:{fold}{len(split)} 2:1\n"


def test_archive_sets_read_their_members(tmp_path):
    root = tmp_path / "data" / "ltr"
    (root / "MSLR-WEB10K").mkdir(parents=True)
    with zipfile.ZipFile(root / "MSLR-WEB10K" / "MSLR-WEB10K.zip", "w") as z:
        for fold in (1, 2):
            for split, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
                z.writestr(f"Fold{fold}/{name}.txt", _archive_lines(fold, split))
    data = LetorDataset("mslr-web10k", 2, data_dir=str(tmp_path / "data"), download=False).load()
    assert data.train.labels.tolist() == [2, 0] and data.train.query_ids.tolist() == [25]
    assert data.test.features.shape == (2, 136) and data.test.features[0, 135] == 2
    assert data.info["files"]["train"]["sha256"] is None
    assert (root / "MSLR-WEB10K" / "MSLR-WEB10K.zip.sha256").is_file()  # unpublished hash: recorded on first use

    (root / "istella-s" / "sample").mkdir(parents=True)
    for split, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
        _write(root / "istella-s" / "sample" / f"{name}.txt", _archive_lines(1, split))
    with tarfile.open(root / "istella-s" / "istella-s-letor.tar.gz", "w:gz") as t:
        t.add(root / "istella-s" / "sample", arcname="sample")
    istella = LetorDataset("istella-s", 1, data_dir=str(tmp_path / "data"), download=False).load()
    assert istella.valid.query_ids.tolist() == [15] and istella.valid.n_features == 220

    (root / "MSLR-WEB30K").mkdir()
    _write(root / "MSLR-WEB30K" / "MSLR-WEB30K.zip", "<html>sign in</html>")  # what a share link may return
    with pytest.raises(DataError, match=r"MSLR-WEB30K\.zip is not a readable zip or tar archive \(ReadError\): .*"
                                        r"delete it \(and MSLR-WEB30K\.zip\.sha256 beside it\), download the "
                                        r"archive from https://") as err:
        LetorDataset("mslr-web30k", 1, data_dir=str(tmp_path / "data"), download=False).load()
    assert "\n" not in str(err.value)


def test_the_config_picks_the_fold_and_refuses_one_out_of_range(tmp_path):
    cfg = compose(["dataset=mq2008", "dataset.fold=3", f"output_dir={tmp_path}", "data_dir=/some/where"])
    plain = {k: v for k, v in cfg.dataset.items() if k not in NOISE_KEYS}
    files = instantiate(plain).remote_files()
    assert {s: f.rel for s, f in files.items()} == {"train": "ltr/MQ2008/Fold3/train.txt",
                                                    "valid": "ltr/MQ2008/Fold3/vali.txt",
                                                    "test": "ltr/MQ2008/Fold3/test.txt"}
    assert files["test"].sha256.startswith("055ac792") and files["valid"].sha256.startswith("cbd42504")
    assert files["train"].url.endswith("/data/MQ2008/Fold3/train.txt")
    bad = compose(["dataset=ohsumed", "dataset.fold=7", f"output_dir={tmp_path}"])
    with pytest.raises(Exception) as err:
        instantiate({k: v for k, v in bad.dataset.items() if k not in NOISE_KEYS})
    user = find_user_error(err.value)
    assert isinstance(user, ConfigError)
    assert str(user) == "dataset.fold=7 is out of range: ohsumed has folds 1..5"
    with pytest.raises(ConfigError, match=r"istella-s has only fold 1$"):
        LetorDataset("istella-s", 2)
    with pytest.raises(ConfigError, match=r"unknown learning-to-rank data set 'mq2007'; known: istella-s, "):
        LetorDataset("mq2007")
