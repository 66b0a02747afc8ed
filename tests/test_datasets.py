"""Loaders: the paper's real splits, checksums, missing files, malformed rows, custom files."""

import shutil
import zipfile

import pytest
import torch

from bench.datasets import CSR, CustomFile, IRBenchmark, Synthetic, split_validation
from bench.datasets import ir_benchmark
from bench.datasets.ir_benchmark import read_proc_zip
from bench.errors import DataError


def test_health_zip_has_the_published_counts(shared_data):
    data = IRBenchmark("health", data_dir=str(shared_data), download=False).load()
    assert (data.n_users, data.n_items) == (1974, 1200)
    assert data.train.shape == (37784, 2) and data.test.shape == (10405, 2)
    assert len(torch.unique(data.train[:, 0])) == 1974 and len(torch.unique(data.test[:, 1])) == 1187
    # the split is the paper's: no test pair is a training pair
    keys = lambda p: p[:, 0] * data.n_items + p[:, 1]  # noqa: E731
    assert not torch.isin(keys(data.test), keys(data.train)).any()


def test_validation_split_follows_the_paper_protocol(shared_data):
    data = IRBenchmark("health", data_dir=str(shared_data), download=False).load()
    s0 = split_validation(data, 0.1, seed=0)
    n_train = torch.bincount(data.train[:, 0], minlength=data.n_users)
    expected = torch.clamp((n_train * 0.1).floor().long(), min=1)  # floor(10%), at least one
    assert torch.equal(s0.valid.degrees(), expected)
    assert s0.train.nnz + s0.valid.nnz == data.train.shape[0]
    union = torch.cat([s0.train.to_pairs(), s0.valid.to_pairs()])
    assert torch.equal(torch.unique(union, dim=0), data.train)
    assert torch.equal(split_validation(data, 0.1, seed=0).valid.indices, s0.valid.indices)
    assert not torch.equal(split_validation(data, 0.1, seed=1).valid.indices, s0.valid.indices)


def test_user_with_one_training_item_keeps_it():
    pairs = torch.tensor([[0, 0], [1, 0], [1, 1], [1, 2]])
    from bench.datasets.base import Interactions

    data = Interactions("t", 2, 3, pairs, torch.tensor([[0, 1]]))
    s = split_validation(data, 0.1, seed=0)
    assert s.train.degrees().tolist() == [1, 2] and s.valid.degrees().tolist() == [0, 1]


def test_checksum_mismatch_is_reported(shared_data, tmp_path):
    local = tmp_path / "data" / "ir-benchmark" / "amazon2014-health"
    local.mkdir(parents=True)
    shutil.copy(shared_data / "ir-benchmark" / "amazon2014-health" / "proc.zip", local / "proc.zip")
    with open(local / "proc.zip", "ab") as f:
        f.write(b"tampered")
    with pytest.raises(DataError, match=r"checksum mismatch for .*proc\.zip: expected 56f9e4b3.*download it again from https://"):
        IRBenchmark("health", data_dir=str(tmp_path / "data"), download=False).load()


def test_missing_file_offline_names_the_file_url_and_destination(tmp_path, monkeypatch):
    monkeypatch.setattr(ir_benchmark, "URL", "http://127.0.0.1:9/{commit}/{source}/proc.zip")  # refused at once
    with pytest.raises(DataError) as err:
        IRBenchmark("electronic", data_dir=str(tmp_path / "empty"), cache_dir=str(tmp_path / "cache")).load()
    msg = str(err.value)
    assert "ir-benchmark/amazon2014-electronic/proc.zip not found" in msg
    assert "download failed" in msg and "http://127.0.0.1:9/" in msg
    assert f"put it at {tmp_path / 'empty' / 'ir-benchmark' / 'amazon2014-electronic' / 'proc.zip'}" in msg
    assert "\n" not in msg


def _zip(path, train, test, summary=None):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("train.tsv", "user_procid\titem_procid\n" + train)
        z.writestr("test.tsv", "user_procid\titem_procid\n" + test)
        if summary:
            z.writestr("summary.txt", summary)
    return path


def test_malformed_row_points_at_file_and_line(tmp_path):
    path = _zip(tmp_path / "proc.zip", "0\t1\n0\t2\n1\tx\n", "0\t0\n")
    with pytest.raises(DataError, match=r"proc\.zip:train\.tsv:4: malformed row '1\\tx': field 2 \('x'\) is not an integer"):
        read_proc_zip(path, "fixture")
    path = _zip(tmp_path / "p2.zip", "0\t1\n0\n", "0\t0\n")
    with pytest.raises(DataError, match=r"train\.tsv:3: malformed row '0'"):
        read_proc_zip(path, "fixture")


def test_summary_mismatch_is_reported(tmp_path):
    path = _zip(tmp_path / "proc.zip", "0\t1\n1\t0\n", "0\t0\n", "Number of users: 2\nNumber of train interactions: 3\n")
    with pytest.raises(DataError, match="n_train is 2 but summary.txt says 3"):
        read_proc_zip(path, "fixture")


def test_custom_tsv_kcore_dedup_and_split(tmp_path):
    rows = ["user\titem\ttime"]
    # users a, b, c each rate items 1..3 (3-core); user d rates only item 1 and item 9 once
    for u in "abc":
        for i in (1, 2, 3):
            rows.append(f"{u}\t{i}\t{ord(u) * 10 + i}")
    rows += ["a\t1\t5", "d\t1\t7", "d\t9\t8"]  # a duplicate (earlier time) and a sparse user
    path = tmp_path / "my.tsv"
    path.write_text("\n".join(rows) + "\n")
    data = CustomFile(str(path), k_core=3, test_fraction=0.34, split_seed=0).load()
    assert (data.n_users, data.n_items) == (3, 3)  # d and item 9 filtered, repeatedly
    assert data.train.shape[0] + data.test.shape[0] == 9
    assert torch.bincount(data.test[:, 0]).tolist() == [1, 1, 1]
    # the duplicate (a, 1) keeps its earliest timestamp, 5
    all_pairs = torch.cat([data.train, data.test])
    all_times = torch.cat([data.train_timestamps, data.test_timestamps])
    assert all_times[(all_pairs[:, 0] == 0) & (all_pairs[:, 1] == 0)].item() == 5.0


def test_custom_errors(tmp_path):
    with pytest.raises(DataError, match="dataset.path"):
        CustomFile(None)
    with pytest.raises(DataError, match="not found"):
        CustomFile(str(tmp_path / "nope.csv")).load()
    bad = tmp_path / "bad.csv"
    bad.write_text("u1,i1,100\nu2,i2,yesterday\n")
    with pytest.raises(DataError, match=r"bad\.csv:2: malformed row 'u2,i2,yesterday': field 3 \('yesterday'\) is not a number"):
        CustomFile(str(bad), k_core=1).load()


def test_recbole_inter_file(shared_data):
    data = CustomFile(str(shared_data / "ml-100k" / "ml-100k.inter"), k_core=1, test_fraction=0.2).load()
    assert (data.n_users, data.n_items) == (943, 1682)
    assert data.train.shape[0] + data.test.shape[0] == 100_000
    assert data.train_timestamps is not None and data.train_timestamps.min() > 8e8


def test_synthetic_is_deterministic_and_sized():
    a, b = Synthetic(n_users=50, n_items=40, seed=1).load(), Synthetic(n_users=50, n_items=40, seed=1).load()
    assert torch.equal(a.train, b.train) and torch.equal(a.test, b.test)
    per_user = torch.bincount(torch.cat([a.train, a.test])[:, 0], minlength=50)
    assert per_user.min() >= 10
    assert not torch.equal(a.train, Synthetic(n_users=50, n_items=40, seed=2).load().train)


def test_csr_gather_rows_matches_python():
    pairs = torch.tensor([[0, 3], [0, 1], [2, 0], [2, 2], [2, 4], [3, 1]])
    csr = CSR.from_pairs(pairs, 4, 5)
    rows, items = csr.gather_rows(torch.tensor([2, 1, 0]))
    assert rows.tolist() == [0, 0, 0, 2, 2] and items.tolist() == [0, 2, 4, 1, 3]
